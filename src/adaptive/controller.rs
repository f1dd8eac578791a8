//! The controller: a state machine over a clock the caller steps. The limit is a fraction of
//! the ceiling (1.0 = the configured budget).
//!
//! - **Signal**: the delivery p90 of the interval (`Signals::latency_ms`, at 1 % resolution),
//!   judged against the path's own [`Baseline`] (or a configured target). The p90, not the
//!   p99: the p99 of a half-second window is its two or three slowest requests — one
//!   scheduler hiccup — while a slower broker slows them all (a tenth of them is enough).
//! - **Cut**: on pressure — the p90 above the target in the interval and in one of the three
//!   before it (evidence of a slower path, not a blip: a broker or proxy stalled for 200 ms
//!   slows a tenth or more of one interval's requests, and its p50 does not move; see
//!   [`evidence`]), records waiting longer than the target with no delivery at all (a stalled
//!   broker), the broker throttling, the buffer filling — the limit is multiplied by
//!   `decrease_factor`, never below the floor, at most once per decrease cool-down (a cut
//!   needs time to show in the signals). A cut the latency did not answer (the p90 at the next
//!   cut within a quarter of the p90 at this one: a slower path, not a loaded one) doubles
//!   that wait, up to [`MAX_CUT_BACKOFF`] times, until a reading is healthy: cutting deeper on
//!   the cool-down's clock would only measure how long the fault lasted, refuse producers for
//!   nothing, and make the recovery longer. A latency the floor did not move is accepted as
//!   the path's own, and the limit grows back under it ([`evidence`]). Pressure
//!   after the limit has grown again cuts at once: the fault is back, or the growth caused
//!   it.
//! - **Recover**: the *recovery level* is the highest share of the ceiling Kafka carried over a
//!   whole interval at healthy latency — the ceiling itself while nothing was carried yet (a
//!   fault present from start-up). Below it, every healthy interval multiplies the limit by
//!   `recovery_factor` (slow start), used or not: the broker has shown it takes that much, so
//!   holding producers below it refuses them for nothing. Pressure that returns while the
//!   limit grows toward the level marks the limit it reached as *suspect* but keeps the level
//!   (one flap of the fault says nothing of the broker's capacity); pressure that returns
//!   again before the limit has been healthy at the suspect level lowers the level to the
//!   limit before that growth (the broker takes less than it did). So a fault that flaps once
//!   costs no recovery time, and a lasting loss of capacity costs two overshoots, not a
//!   sawtooth ([`level`]: and why a fault flapping every other interval lowers it too).
//! - **Probe**: at or above the level, the limit grows by `increase_step` at most once per
//!   increase cool-down (doubled by each probe that brought pressure), back to the ceiling:
//!   what the broker takes there is unknown, and a limit the producers do not reach refuses
//!   only their next surge, for nothing, while the path is at its baseline.
//! - **Dead band**: with the p90 between healthy (`healthy_fraction` of the way from the
//!   baseline to the target) and the target, or records waiting that no delivery measured, it
//!   holds — neither cut nor grown, so a load that sits there cannot make it oscillate.

use super::baseline::Baseline;
use crate::config::AdaptiveConfig;
use evidence::{Cut, Evidence};
use level::Level;

pub mod evidence;
mod level;
mod reason;

/// What the agent measured over the last interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signals {
    /// Requests Kafka answered in the interval (each a delivery: its last record's report).
    pub deliveries: u64,
    /// Their delivery p90 (ms): the reading the controller follows.
    pub latency_ms: Option<f64>,
    /// The broker's quota throttle time (largest over brokers), ms.
    pub throttle_ms: i64,
    /// Buffer occupancy, 0 to 1.
    pub buffer_fill: f64,
    /// How long records have waited with no delivery at all, ms (0 when something was
    /// delivered in the interval or nothing waits): a lower bound on the age of the oldest
    /// record in flight, the one latency signal a stalled broker still gives.
    pub stalled_ms: f64,
    /// Admitted rate ÷ the current limit's rate (1.0: the limit was used up).
    pub limit_used: f64,
    /// Requests refused by the adaptive limit in the interval.
    pub refused: u64,
    /// Intervals the latency window spans: the agent merges intervals of too few deliveries
    /// into the next (0 and 1: this interval alone).
    pub window_intervals: u32,
}

/// Why the limit fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    Latency,
    Throttle,
    Buffer,
    /// No delivery for longer than the target while records wait.
    Stall,
}

impl Cause {
    pub const ALL: [Cause; 4] = [Cause::Latency, Cause::Throttle, Cause::Buffer, Cause::Stall];

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Latency => "latency",
            Cause::Throttle => "throttle",
            Cause::Buffer => "buffer",
            Cause::Stall => "stall",
        }
    }
}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Move {
    Decrease(Cause),
    /// Grew by `recovery_factor` toward the recovery level.
    Recover,
    /// Grew by `increase_step` at or above it (probing).
    Increase,
    /// Held, and why (`healthy`, `dead_band`, `cooldown`, `not_reached`, `ceiling`, `floor`).
    Hold(&'static str),
}

/// Deliveries needed in a window before its p90 counts (as a signal or for the baseline).
pub const MIN_DELIVERIES: u64 = 20;
/// A window is not merged over more intervals than this: then its p90 counts from
/// [`MIN_FEW_DELIVERIES`] (a quiet path is still watched, every 4 s at the default interval).
pub const MAX_WINDOW_INTERVALS: u32 = 8;
pub const MIN_FEW_DELIVERIES: u64 = 5;
/// A window of fewer than [`MIN_FEW_DELIVERIES`] is merged on up to this many intervals (16 s
/// at the default interval); past it, only the stall signal watches a path that quiet.
pub const LONGEST_WINDOW_INTERVALS: u32 = 32;

/// Share of the limit's rate that counts as having reached it.
const REACHED: f64 = 0.9;

/// Failed probes stretch the wait between probes to at most this many increase cool-downs.
const MAX_PROBE_BACKOFF: u64 = 32;

/// Cuts the latency did not answer stretch the wait between cuts to at most this many
/// decrease cool-downs.
const MAX_CUT_BACKOFF: u64 = 8;

#[derive(Debug, Clone)]
pub struct Controller {
    settings: AdaptiveConfig,
    limit: f64,
    /// The path's latency at its best and how much it wanders: what "slow" means.
    baseline: Baseline,
    /// When the previous step ran: the interval a step measures started there.
    last_step_ns: Option<u64>,
    last_decrease_ns: Option<u64>,
    last_change_ns: Option<u64>,
    /// The limit before its latest growth, until the grown-to level has stayed healthy for a
    /// decrease cool-down: pressure in that time is the broker refusing the growth.
    grown_from: Option<f64>,
    /// What slow start brings the limit back to.
    level: Level,
    /// The latest stall seen (ms), for the reason.
    stalled_ms: f64,
    /// Whether the latest growth was a probe above the recovery level.
    probed: bool,
    /// The wait between probes: the increase cool-down, doubled by every probe that brought
    /// pressure (up to [`MAX_PROBE_BACKOFF`] times), reset by one that held. A broker at its
    /// capacity is then probed ever more rarely, not cut every few seconds.
    probe_wait_ms: u64,
    /// The wait between cuts: the decrease cool-down, doubled by every latency cut the latency
    /// did not answer (up to [`MAX_CUT_BACKOFF`] times), reset by a healthy reading.
    cut_wait_ms: u64,
    /// The readings before this one, and whether the cuts on them were answered.
    evidence: Evidence,
    /// When the last reading was measured: the baseline learns over the time between them.
    last_reading_ns: Option<u64>,
    /// The last step's deliveries when they were too few to measure (for the reason).
    unmeasured: Option<(u64, u32)>,
    /// The pressure the last step saw.
    pressure: Option<Cause>,
    /// Whether the producers reached the limit (or were refused by it) in the last healthy
    /// interval: growth above the recovery level then probes what the broker takes, else it
    /// only gives back what they do not use.
    reached: bool,
    last: Move,
}

impl Controller {
    pub fn new(settings: AdaptiveConfig) -> Self {
        Self {
            limit: 1.0,
            baseline: Baseline::default(),
            last_step_ns: None,
            last_decrease_ns: None,
            last_change_ns: None,
            grown_from: None,
            level: Level::default(),
            stalled_ms: 0.0,
            probed: false,
            probe_wait_ms: settings.increase_cooldown_ms,
            cut_wait_ms: settings.decrease_cooldown_ms,
            evidence: Evidence::default(),
            last_reading_ns: None,
            unmeasured: None,
            pressure: None,
            reached: false,
            last: Move::Hold("ceiling"),
            settings,
        }
    }

    pub fn set_settings(&mut self, settings: AdaptiveConfig) {
        self.limit = self.limit.max(settings.floor);
        self.probe_wait_ms = settings.increase_cooldown_ms;
        self.cut_wait_ms = settings.decrease_cooldown_ms;
        self.settings = settings;
    }

    /// The wait between probes now (ms).
    pub fn probe_wait_ms(&self) -> u64 {
        self.probe_wait_ms
    }

    /// The wait between cuts now (ms).
    pub fn cut_wait_ms(&self) -> u64 {
        self.cut_wait_ms
    }

    /// The limit as a fraction of the ceiling.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    pub fn last_move(&self) -> Move {
        self.last
    }

    /// The level healthy signals bring the limit back to by slow start (fraction of the
    /// ceiling): what Kafka carried at healthy latency, or the ceiling while nothing was.
    pub fn recover_to(&self) -> f64 {
        self.level.get()
    }

    /// Whether the recovery level was learned (carried at healthy latency), not assumed.
    pub fn level_learned(&self) -> bool {
        self.level.learned()
    }

    /// The limit at which growth last brought pressure back, while unconfirmed.
    pub fn suspect(&self) -> Option<f64> {
        self.level.suspect()
    }

    /// Seconds of healthy signals that bring the limit to the recovery level (an upper bound:
    /// each step grows by at least `recovery_factor`); 0 at or above it.
    pub fn time_to_recover_s(&self) -> f64 {
        let level = self.recover_to();
        if self.limit >= level {
            return 0.0;
        }
        let steps = ((level / self.limit).ln() / self.settings.recovery_factor.ln()).ceil();
        steps.clamp(0.0, 1e6) * self.settings.interval_ms as f64 / 1000.0
    }

    /// The wait with no delivery above which a stall is pressure: the target, or while none is
    /// known yet (no baseline), what it would be over a baseline at `min_target_ms`.
    pub fn stall_after_ms(&self) -> f64 {
        self.target_ms()
            .unwrap_or(self.settings.min_target_ms as f64 * self.settings.baseline_factor)
    }

    /// Delivery p90 above which Kafka counts as slow (the baseline's target, or above a
    /// latency accepted as the path's own); `None` while it is still unknown (no configured
    /// target and no baseline yet).
    pub fn target_ms(&self) -> Option<f64> {
        let t = self.baseline.target_ms(&self.settings)?;
        Some(self.evidence.slow_line(t))
    }

    /// Delivery p90 under which Kafka counts as healthy (between it and the target: hold).
    pub fn healthy_below_ms(&self) -> Option<f64> {
        let h = self.baseline.healthy_below_ms(&self.settings)?;
        Some(self.evidence.healthy_line(h))
    }

    /// The p90 that cuts did not move, taken as the path's own for now (ms).
    pub fn accepted_ms(&self) -> Option<f64> {
        self.evidence.accepted()
    }

    /// The last step's deliveries and the intervals they span, when too few to measure.
    pub fn unmeasured(&self) -> Option<(u64, u32)> {
        self.unmeasured
    }

    /// The path's baseline: its latency at its best, and how much it wanders.
    pub fn baseline(&self) -> Baseline {
        self.baseline
    }

    fn since(&self, at: Option<u64>, now: u64) -> u64 {
        at.map_or(u64::MAX, |t| now.saturating_sub(t))
    }

    /// One interval's decision.
    pub fn step(&mut self, now_ns: u64, s: Signals) -> Move {
        let measured = s.deliveries >= MIN_DELIVERIES
            || (s.deliveries >= MIN_FEW_DELIVERIES && s.window_intervals >= MAX_WINDOW_INTERVALS);
        let reading = s.latency_ms.filter(|_| measured);
        self.unmeasured = (!measured).then_some((s.deliveries, s.window_intervals.max(1)));
        let dt_s = self
            .last_reading_ns
            .map_or(0.0, |p| now_ns.saturating_sub(p) as f64 / 1e9);
        // Judged against what was known before this reading.
        let target = self.target_ms();
        let healthy_below = self.healthy_below_ms();
        let stalled = s.stalled_ms.is_finite() && s.stalled_ms > self.stall_after_ms();
        self.stalled_ms = if s.stalled_ms.is_finite() {
            s.stalled_ms.max(0.0)
        } else {
            0.0
        };
        // Slow in this interval and in one of the three before: a slower path, not a blip.
        let above = matches!((reading, target), (Some(x), Some(t)) if x > t);
        let slow = above && target.is_some_and(|t| self.evidence.confirms(t));
        if let Some(x) = reading {
            self.evidence.read(
                x,
                self.baseline.healthy_below_ms(&self.settings),
                self.baseline.target_ms(&self.settings),
            );
            self.last_reading_ns = Some(now_ns);
            self.baseline.learn(x, dt_s, slow, &self.settings);
        }
        let cause = if s.throttle_ms > 0 {
            Some(Cause::Throttle)
        } else if slow {
            Some(Cause::Latency)
        } else if stalled {
            Some(Cause::Stall)
        } else if s.buffer_fill > self.settings.buffer_pressure {
            Some(Cause::Buffer)
        } else {
            None
        };
        // The interval just measured ran at one limit when it last changed at or before the
        // previous step: only then does it say what that limit does to Kafka.
        let whole = self
            .last_step_ns
            .is_some_and(|p| self.last_change_ns.is_none_or(|c| c <= p));
        self.last_step_ns = Some(now_ns);
        self.pressure = cause;
        let decision = match cause {
            Some(cause) => self.cut(now_ns, cause, reading),
            None => {
                // Healthy again: the next pressure is cut on the cool-down's clock. A reading
                // that only dips under the target keeps the back-off (a path whose p90 sits at
                // the target dips every few intervals).
                if matches!((reading, healthy_below), (Some(x), Some(h)) if x < h) {
                    self.cut_wait_ms = self.settings.decrease_cooldown_ms;
                }
                let healthy = match (reading, healthy_below) {
                    (Some(x), Some(h)) => x < h,
                    // Too few deliveries to count as pressure while records wait: the ones
                    // there are say how the broker answers (a low limit delivers few)...
                    (None, Some(h)) if s.buffer_fill > 0.0 => {
                        s.deliveries > 0 && s.latency_ms.is_some_and(|x| x < h)
                    }
                    // ...and none at all is a slow broker answering in bursts, not a healthy one
                    // (as is anything unmeasured before a target is known).
                    (None, _) if s.buffer_fill > 0.0 => false,
                    // Nothing waiting: a few deliveries still say how the broker answers — slow
                    // ones are no reason to grow (the limit must not undo its own cuts between
                    // readings of a quiet path).
                    (None, Some(h)) => s.latency_ms.is_none_or(|x| x < h),
                    // No target yet: no sign of trouble.
                    (None, None) | (_, None) => true,
                } && s.buffer_fill < self.settings.buffer_pressure / 2.0;
                self.reached = s.limit_used >= REACHED || s.refused > 0;
                if healthy && whole {
                    self.carried(now_ns, s.limit_used);
                }
                if above {
                    // Over the target once, the interval before was not: hold, and see.
                    Move::Hold("unconfirmed")
                } else {
                    self.grow(now_ns, healthy)
                }
            }
        };
        self.last = decision;
        decision
    }

    /// A whole healthy interval: what it carried raises the recovery level (and clears a
    /// suspect level it reached), and a growth that has stayed healthy for a decrease
    /// cool-down is settled.
    fn carried(&mut self, now_ns: u64, used: f64) {
        // What was admitted, not what was refused: a refusal may be one tenant's share running
        // out while the limit as a whole was not used.
        let carried = if used >= REACHED {
            self.limit
        } else {
            (used * self.limit).min(self.limit)
        };
        self.level.carried(self.limit, carried);
        let settle_ns = self.settings.decrease_cooldown_ms.saturating_mul(1_000_000);
        if self.grown_from.is_some() && self.since(self.last_change_ns, now_ns) >= settle_ns {
            self.grown_from = None;
            if self.probed {
                self.probe_wait_ms = self.settings.increase_cooldown_ms;
            }
        }
    }

    fn cut(&mut self, now_ns: u64, cause: Cause, reading: Option<f64>) -> Move {
        let cooldown_ns = self.cut_wait_ms.saturating_mul(1_000_000);
        let at_floor = self.limit <= self.settings.floor;
        if self.grown_from.is_none() && self.since(self.last_decrease_ns, now_ns) < cooldown_ns {
            return Move::Hold(if at_floor { "floor" } else { "cooldown" });
        }
        let reading = reading.filter(|_| cause == Cause::Latency);
        let verdict = reading.map_or(Cut::Answered, |x| {
            self.evidence.cut_due(x, self.grown_from.is_some())
        });
        let floor_ms = self.baseline.floor_ms();
        if let (true, Cut::Unanswered, Some(x)) = (at_floor, verdict, reading) {
            // The load is at the floor and the latency where it was: the path's own (unless
            // far past its baseline: a fault). No more holding, none of the back-off.
            if !self.evidence.accept(x, floor_ms) {
                self.last_decrease_ns = Some(now_ns);
                return Move::Hold("floor");
            }
            self.pressure = None;
            self.cut_wait_ms = self.settings.decrease_cooldown_ms;
            return Move::Hold("accepted");
        }
        if verdict == Cut::Unanswered {
            let most = self
                .settings
                .decrease_cooldown_ms
                .saturating_mul(MAX_CUT_BACKOFF);
            self.cut_wait_ms = self.cut_wait_ms.saturating_mul(2).min(most);
        }
        if at_floor {
            // Judged as a cut would be, on its clock.
            self.last_decrease_ns = Some(now_ns);
            return Move::Hold("floor");
        }
        if let Some(from) = self.grown_from.take() {
            if !self.probed {
                self.level.pressure_during_growth(from, self.limit);
            } else {
                let most = self
                    .settings
                    .increase_cooldown_ms
                    .saturating_mul(MAX_PROBE_BACKOFF);
                self.probe_wait_ms = self.probe_wait_ms.saturating_mul(2).min(most);
            }
        }
        self.limit = (self.limit * self.settings.decrease_factor).max(self.settings.floor);
        self.last_decrease_ns = Some(now_ns);
        self.last_change_ns = Some(now_ns);
        Move::Decrease(cause)
    }

    fn grow(&mut self, now_ns: u64, healthy: bool) -> Move {
        let from = self.limit;
        if from >= 1.0 {
            return Move::Hold("ceiling");
        }
        if !healthy {
            return Move::Hold("dead_band");
        }
        let cooldown_ns = self.probe_wait_ms.saturating_mul(1_000_000);
        let level = Some(self.recover_to()).filter(|level| from < *level);
        let (to, decision) = match level {
            // Once per interval, no cool-down: each level below the recovery level is measured
            // for a whole interval before the next, and pressure cuts at once.
            Some(level) => (
                (from * self.settings.recovery_factor)
                    .max(from + self.settings.increase_step)
                    .min(level),
                Move::Recover,
            ),
            None if self.since(self.last_change_ns, now_ns) < cooldown_ns => {
                return Move::Hold("cooldown")
            }
            None => (from + self.settings.increase_step, Move::Increase),
        };
        self.limit = to.min(1.0);
        self.probed = decision == Move::Increase;
        self.grown_from = Some(from);
        self.last_change_ns = Some(now_ns);
        decision
    }
}

#[cfg(test)]
mod tests;
