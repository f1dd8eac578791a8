//! The controller: a state machine over a clock the caller steps. The limit is a fraction of
//! the ceiling (1.0 = the configured budget).
//!
//! - **Cut**: on pressure — delivery p99 above the target, records waiting longer than the
//!   target with no delivery at all (a stalled broker), the broker throttling, the buffer
//!   filling — the limit is multiplied by `decrease_factor`, never below the floor, at most
//!   once per decrease cool-down (a cut needs time to show in the signals). Pressure after the
//!   limit has grown again cuts at once: the fault is back, or the growth caused it.
//! - **Recover**: the *recovery level* is the highest share of the ceiling Kafka carried over a
//!   whole interval at healthy latency — the ceiling itself while nothing was carried yet (a
//!   fault present from start-up). Below it, every healthy interval multiplies the limit by
//!   `recovery_factor` (slow start), used or not: the broker has shown it takes that much, so
//!   holding producers below it refuses them for nothing. Pressure that returns while the
//!   limit grows toward the level marks the limit it reached as *suspect* but keeps the level
//!   (one flap of the fault says nothing of the broker's capacity); pressure that returns
//!   again before the limit has been healthy at the suspect level lowers the level to the
//!   limit before that growth (the broker takes less than it did). So a flapping fault costs
//!   no recovery time, and a lasting loss of capacity costs two overshoots, not a sawtooth.
//! - **Probe**: at or above the level, the limit grows by `increase_step` only when it was
//!   reached (or refused someone), at most once per increase cool-down: what the broker takes
//!   there is unknown.
//! - **Dead band**: with the p99 between `healthy_fraction` of the target and the target, or
//!   records waiting that no delivery measured, it holds — neither cut nor grown, so a load
//!   that sits there cannot make it oscillate.

use crate::config::AdaptiveConfig;

/// What the agent measured over the last interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signals {
    /// Records Kafka acknowledged in the interval, and their p99 latency.
    pub deliveries: u64,
    pub delivery_p99_ms: Option<f64>,
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

/// Deliveries needed in an interval before its p99 counts (as a signal or as the baseline).
const MIN_DELIVERIES: u64 = 20;

/// Share of the limit's rate that counts as having reached it.
const REACHED: f64 = 0.9;

/// Failed probes stretch the wait between probes to at most this many increase cool-downs.
const MAX_PROBE_BACKOFF: u64 = 32;

#[derive(Debug, Clone)]
pub struct Controller {
    settings: AdaptiveConfig,
    limit: f64,
    baseline_p99_ms: Option<f64>,
    /// When the previous step ran: the interval a step measures started there.
    last_step_ns: Option<u64>,
    last_decrease_ns: Option<u64>,
    last_change_ns: Option<u64>,
    /// The limit before its latest growth, until the grown-to level has stayed healthy for a
    /// decrease cool-down: pressure in that time is the broker refusing the growth.
    grown_from: Option<f64>,
    /// The highest share of the ceiling Kafka carried over a whole healthy interval (lowered
    /// when growing toward it brought pressure back twice); `None` until one was seen — then
    /// slow start aims at the ceiling.
    recover_to: Option<f64>,
    /// The limit a growth toward the recovery level reached when pressure came back, until the
    /// limit has carried that much at healthy latency: pressure during growth once more lowers
    /// the level.
    suspect: Option<f64>,
    /// The latest stall seen (ms), for the reason.
    stalled_ms: f64,
    /// Whether the latest growth was a probe above the recovery level.
    probed: bool,
    /// The wait between probes: the increase cool-down, doubled by every probe that brought
    /// pressure (up to [`MAX_PROBE_BACKOFF`] times), reset by one that held. A broker at its
    /// capacity is then probed ever more rarely, not cut every few seconds.
    probe_wait_ms: u64,
    /// The pressure the last step saw.
    pressure: Option<Cause>,
    last: Move,
}

impl Controller {
    pub fn new(settings: AdaptiveConfig) -> Self {
        Self {
            limit: 1.0,
            baseline_p99_ms: None,
            last_step_ns: None,
            last_decrease_ns: None,
            last_change_ns: None,
            grown_from: None,
            recover_to: None,
            suspect: None,
            stalled_ms: 0.0,
            probed: false,
            probe_wait_ms: settings.increase_cooldown_ms,
            pressure: None,
            last: Move::Hold("ceiling"),
            settings,
        }
    }

    pub fn set_settings(&mut self, settings: AdaptiveConfig) {
        self.limit = self.limit.max(settings.floor);
        self.probe_wait_ms = settings.increase_cooldown_ms;
        self.settings = settings;
    }

    /// The wait between probes now (ms).
    pub fn probe_wait_ms(&self) -> u64 {
        self.probe_wait_ms
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
        self.recover_to.unwrap_or(1.0)
    }

    /// Whether the recovery level was learned (carried at healthy latency), not assumed.
    pub fn level_learned(&self) -> bool {
        self.recover_to.is_some()
    }

    /// The limit at which growth last brought pressure back, while unconfirmed.
    pub fn suspect(&self) -> Option<f64> {
        self.suspect
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

    /// Delivery p99 above which Kafka counts as slow; `None` while it is still unknown
    /// (no configured target and no baseline yet).
    pub fn target_ms(&self) -> Option<f64> {
        let min = self.settings.min_target_ms as f64;
        match self.settings.target_delivery_ms {
            Some(t) => Some(t as f64),
            None => self
                .baseline_p99_ms
                .map(|b| (b * self.settings.baseline_factor).max(min)),
        }
    }

    fn since(&self, at: Option<u64>, now: u64) -> u64 {
        at.map_or(u64::MAX, |t| now.saturating_sub(t))
    }

    /// One interval's decision.
    pub fn step(&mut self, now_ns: u64, s: Signals) -> Move {
        let measured = s.deliveries >= MIN_DELIVERIES;
        let p99 = s.delivery_p99_ms.filter(|_| measured);
        // The baseline is the best p99 seen under load; it creeps up 1 % per interval so a
        // cluster that became slower for good is eventually the new normal.
        if let Some(p) = p99 {
            self.baseline_p99_ms = Some(match self.baseline_p99_ms {
                None => p,
                Some(b) if p < b => p,
                Some(b) => (b * 1.01).min(p),
            });
        }
        let target = self.target_ms();
        let stalled = s.stalled_ms.is_finite() && s.stalled_ms > self.stall_after_ms();
        self.stalled_ms = if s.stalled_ms.is_finite() {
            s.stalled_ms.max(0.0)
        } else {
            0.0
        };
        let cause = if s.throttle_ms > 0 {
            Some(Cause::Throttle)
        } else if matches!((p99, target), (Some(p), Some(t)) if p > t) {
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
            Some(cause) => self.cut(now_ns, cause),
            None => {
                let healthy_below = target.map(|t| t * self.settings.healthy_fraction);
                let healthy = match (p99, healthy_below) {
                    (Some(p), Some(h)) => p < h,
                    // Too few deliveries to count as pressure while records wait: the ones
                    // there are say how the broker answers (a low limit delivers few)...
                    (None, Some(h)) if s.buffer_fill > 0.0 => {
                        s.deliveries > 0 && s.delivery_p99_ms.is_some_and(|p| p < h)
                    }
                    // ...and none at all is a slow broker answering in bursts, not a healthy one
                    // (as is anything unmeasured before a target is known).
                    (None, _) if s.buffer_fill > 0.0 => false,
                    // Nothing waiting (idle), or no target yet: no sign of trouble.
                    (None, _) | (_, None) => true,
                } && s.buffer_fill < self.settings.buffer_pressure / 2.0;
                let reached = s.limit_used >= REACHED || s.refused > 0;
                if healthy && whole {
                    self.carried(now_ns, s.limit_used);
                }
                self.grow(now_ns, healthy, reached)
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
        // With nothing learned, a limit below the ceiling is one a fault cut (at start-up):
        // what it carries is no level to stop at, and slow start aims at the ceiling.
        let learn = self.recover_to.is_some() || self.limit >= 1.0;
        if learn && carried.is_finite() && carried > 0.0 {
            self.recover_to = Some(self.recover_to.map_or(carried, |r| r.max(carried)));
        }
        if self.suspect.is_some_and(|s| self.limit >= s) {
            self.suspect = None;
        }
        let settle_ns = self.settings.decrease_cooldown_ms.saturating_mul(1_000_000);
        if self.grown_from.is_some() && self.since(self.last_change_ns, now_ns) >= settle_ns {
            self.grown_from = None;
            if self.probed {
                self.probe_wait_ms = self.settings.increase_cooldown_ms;
            }
        }
    }

    fn cut(&mut self, now_ns: u64, cause: Cause) -> Move {
        let cooldown_ns = self.settings.decrease_cooldown_ms.saturating_mul(1_000_000);
        if self.limit <= self.settings.floor {
            return Move::Hold("floor");
        }
        if self.grown_from.is_none() && self.since(self.last_decrease_ns, now_ns) < cooldown_ns {
            return Move::Hold("cooldown");
        }
        if let Some(from) = self.grown_from.take() {
            if !self.probed {
                // Growth toward the recovery level brought pressure back. Once is the fault
                // flapping (the level stays); again before the limit was healthy at the
                // suspect level, the broker takes less than it did: recovery stops below it.
                if self.suspect.is_some() {
                    self.recover_to = Some(self.recover_to.map_or(from, |r| r.min(from)));
                    self.suspect = None;
                } else {
                    self.suspect = Some(self.limit);
                }
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

    fn grow(&mut self, now_ns: u64, healthy: bool, reached: bool) -> Move {
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
            None if !reached => return Move::Hold("not_reached"),
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

    /// Where the limit stands, as a word for the admin API and the metrics.
    pub fn phase(&self) -> &'static str {
        if self.limit >= 1.0 && self.pressure.is_none() {
            return "ceiling";
        }
        match (self.last, self.pressure) {
            (Move::Hold("ceiling"), _) => "ceiling",
            (Move::Decrease(_), _) => "cutting",
            (Move::Hold("floor"), _) => "floor",
            (Move::Hold(_), Some(_)) => "cutting",
            (Move::Hold("dead_band"), None) => "dead_band",
            (Move::Recover, _) => "recovering",
            (Move::Hold("not_reached"), None) => "demand_below_limit",
            (Move::Increase | Move::Hold(_), _) => "probing",
        }
    }

    /// Why the limit is where it is, in one sentence.
    pub fn reason(&self) -> String {
        let pct = |v: f64| format!("{:.0} %", v * 100.0);
        let s = &self.settings;
        let target = self
            .target_ms()
            .map_or_else(|| "the target".to_string(), |t| format!("{t:.0} ms"));
        let healthy = self.target_ms().map_or_else(
            || "healthy".to_string(),
            |t| format!("{:.0} ms", t * s.healthy_fraction),
        );
        let pressure = |c: Cause| match c {
            Cause::Latency => format!("delivery p99 is above {target}"),
            Cause::Throttle => "the broker throttles".to_string(),
            Cause::Buffer => format!("the buffer is over {} full", pct(s.buffer_pressure)),
            Cause::Stall => format!(
                "nothing was delivered for {:.0} ms while records wait (over {:.0} ms)",
                self.stalled_ms,
                self.stall_after_ms()
            ),
        };
        let level = pct(self.recover_to());
        let carried = if self.level_learned() {
            format!("{level}, what it last carried at healthy latency")
        } else {
            "the ceiling (nothing carried at healthy latency yet)".to_string()
        };
        let suspect = self.suspect.map_or_else(String::new, |v| {
            format!(
                "; pressure came back once at {}: again before it is healthy there lowers the \
                 level",
                pct(v)
            )
        });
        if self.phase() == "ceiling" {
            return "at the ceiling: Kafka is healthy and the configured budgets alone decide"
                .into();
        }
        match (self.last, self.pressure) {
            (Move::Hold("ceiling"), _) => {
                "at the ceiling: Kafka is healthy and the configured budgets alone decide".into()
            }
            (Move::Decrease(c), _) => format!(
                "cut to {} because {}; cuts again every {} ms while it lasts",
                pct(self.limit),
                pressure(c),
                s.decrease_cooldown_ms
            ),
            (Move::Hold("floor"), Some(c)) => {
                format!("at its floor ({}) because {}", pct(s.floor), pressure(c))
            }
            (Move::Hold(_), Some(c)) => format!(
                "{}: waiting {} ms after the last cut for it to show before cutting again",
                pressure(c),
                s.decrease_cooldown_ms
            ),
            (Move::Hold("dead_band"), None) => format!(
                "holding in the dead band: delivery p99 between {healthy} and {target} \
                 (or records waiting with too few deliveries to measure)"
            ),
            (Move::Recover, _) => format!(
                "Kafka is healthy (p99 under {healthy}): growing x{} per {} ms interval back to \
                 {carried}; there in {:.1} s{suspect}",
                s.recovery_factor,
                s.interval_ms,
                self.time_to_recover_s()
            ),
            (Move::Hold("not_reached"), None) => format!(
                "Kafka is healthy; producers use less than the limit, so it probes no higher \
                 than {level} (what Kafka carried at healthy latency)"
            ),
            (_, _) => format!(
                "Kafka is healthy and the limit is used: probing above {level} by {} of the \
                 ceiling every {} ms (doubled by each probe that brought pressure)",
                pct(s.increase_step),
                self.probe_wait_ms
            ),
        }
    }
}

#[cfg(test)]
mod tests;
