//! The controller: a state machine over a clock the caller steps. The limit is a fraction of
//! the ceiling (1.0 = the configured budget). It falls multiplicatively on pressure — delivery
//! p99 above the target, the broker throttling, the buffer filling — at most once per
//! decrease cool-down, never below the floor; it rises additively only when Kafka is healthy
//! (p99 below `healthy_fraction` of the target) *and* the current limit was actually reached,
//! at most once per increase cool-down; between the two (the dead band) it holds.

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
}

impl Cause {
    pub const ALL: [Cause; 3] = [Cause::Latency, Cause::Throttle, Cause::Buffer];

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Latency => "latency",
            Cause::Throttle => "throttle",
            Cause::Buffer => "buffer",
        }
    }
}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Move {
    Decrease(Cause),
    Increase,
    /// Held, and why (`healthy`, `dead_band`, `cooldown`, `not_reached`, `ceiling`, `floor`).
    Hold(&'static str),
}

/// Deliveries needed in an interval before its p99 counts (as a signal or as the baseline).
const MIN_DELIVERIES: u64 = 20;

#[derive(Debug, Clone)]
pub struct Controller {
    settings: AdaptiveConfig,
    limit: f64,
    baseline_p99_ms: Option<f64>,
    last_decrease_ns: Option<u64>,
    last_change_ns: Option<u64>,
    last: Move,
}

impl Controller {
    pub fn new(settings: AdaptiveConfig) -> Self {
        Self {
            settings,
            limit: 1.0,
            baseline_p99_ms: None,
            last_decrease_ns: None,
            last_change_ns: None,
            last: Move::Hold("ceiling"),
        }
    }

    pub fn set_settings(&mut self, settings: AdaptiveConfig) {
        self.limit = self.limit.max(settings.floor);
        self.settings = settings;
    }

    /// The limit as a fraction of the ceiling.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    pub fn last_move(&self) -> Move {
        self.last
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
        let cause = if s.throttle_ms > 0 {
            Some(Cause::Throttle)
        } else if matches!((p99, target), (Some(p), Some(t)) if p > t) {
            Some(Cause::Latency)
        } else if s.buffer_fill > self.settings.buffer_pressure {
            Some(Cause::Buffer)
        } else {
            None
        };
        let ms = |v: u64| v.saturating_mul(1_000_000);
        let decision = if let Some(cause) = cause {
            if self.limit <= self.settings.floor {
                Move::Hold("floor")
            } else if self.since(self.last_decrease_ns, now_ns)
                < ms(self.settings.decrease_cooldown_ms)
            {
                Move::Hold("cooldown")
            } else {
                self.limit = (self.limit * self.settings.decrease_factor).max(self.settings.floor);
                self.last_decrease_ns = Some(now_ns);
                self.last_change_ns = Some(now_ns);
                Move::Decrease(cause)
            }
        } else {
            let healthy = match (p99, target) {
                (Some(p), Some(t)) => p < t * self.settings.healthy_fraction,
                // Too little delivered to measure while records wait in the buffer: a slow
                // broker answering in bursts, not a healthy one.
                (None, _) if s.buffer_fill > 0.0 => false,
                // Nothing waiting (idle), or no target yet: no sign of trouble.
                (None, _) | (_, None) => true,
            } && s.buffer_fill < self.settings.buffer_pressure / 2.0;
            if self.limit >= 1.0 {
                Move::Hold("ceiling")
            } else if !healthy {
                Move::Hold("dead_band")
            } else if s.limit_used < 0.9 && s.refused == 0 {
                Move::Hold("not_reached")
            } else if self.since(self.last_change_ns, now_ns)
                < ms(self.settings.increase_cooldown_ms)
            {
                Move::Hold("cooldown")
            } else {
                self.limit = (self.limit + self.settings.increase_step).min(1.0);
                self.last_change_ns = Some(now_ns);
                Move::Increase
            }
        };
        self.last = decision;
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn settings() -> AdaptiveConfig {
        AdaptiveConfig {
            enabled: true,
            target_delivery_ms: Some(100),
            ..AdaptiveConfig::default()
        }
    }

    fn slow() -> Signals {
        Signals {
            deliveries: 100,
            delivery_p99_ms: Some(400.0),
            ..Signals::default()
        }
    }

    fn fast(used: f64) -> Signals {
        Signals {
            deliveries: 100,
            delivery_p99_ms: Some(5.0),
            limit_used: used,
            ..Signals::default()
        }
    }

    #[test]
    fn latency_above_the_target_cuts_the_limit_once_per_cooldown() {
        let mut c = Controller::new(settings());
        assert_eq!(c.step(10 * S, slow()), Move::Decrease(Cause::Latency));
        assert!((c.limit() - 0.7).abs() < 1e-9);
        // 1 s later: still in the 2 s cool-down.
        assert_eq!(c.step(11 * S, slow()), Move::Hold("cooldown"));
        assert_eq!(c.step(12 * S, slow()), Move::Decrease(Cause::Latency));
        assert!((c.limit() - 0.49).abs() < 1e-9);
    }

    #[test]
    fn too_few_deliveries_with_records_waiting_is_no_sign_of_health() {
        let mut c = Controller::new(settings());
        c.step(0, slow());
        // A broker answering once per long round trip: some intervals see no delivery at all
        // while the buffer holds records. That must not raise the limit.
        let quiet = |fill: f64| Signals {
            deliveries: 0,
            delivery_p99_ms: None,
            buffer_fill: fill,
            limit_used: 1.0,
            ..Signals::default()
        };
        assert_eq!(c.step(10 * S, quiet(0.01)), Move::Hold("dead_band"));
        // Idle (nothing waiting, nothing delivered): no sign of trouble.
        assert_eq!(c.step(11 * S, quiet(0.0)), Move::Increase);
    }

    #[test]
    fn the_limit_never_goes_below_the_floor() {
        let mut c = Controller::new(settings());
        for i in 0..40 {
            c.step(i * 3 * S, slow());
        }
        assert!((c.limit() - 0.05).abs() < 1e-9);
        assert_eq!(c.step(200 * S, slow()), Move::Hold("floor"));
    }

    #[test]
    fn it_rises_only_when_healthy_and_the_limit_was_reached() {
        let mut c = Controller::new(settings());
        c.step(0, slow());
        // Healthy but the limit was not used: hold.
        assert_eq!(c.step(10 * S, fast(0.5)), Move::Hold("not_reached"));
        assert_eq!(c.step(11 * S, fast(0.95)), Move::Increase);
        assert!((c.limit() - 0.75).abs() < 1e-9);
        // The increase cool-down (1 s).
        assert_eq!(c.step(11 * S + S / 2, fast(1.0)), Move::Hold("cooldown"));
        assert_eq!(c.step(12 * S, fast(1.0)), Move::Increase);
        // Refusals count as reaching it too.
        let refused = Signals {
            refused: 3,
            ..fast(0.2)
        };
        assert_eq!(c.step(13 * S, refused), Move::Increase);
    }

    #[test]
    fn between_healthy_and_the_target_it_holds() {
        let mut c = Controller::new(settings());
        c.step(0, slow());
        // p99 of 70 ms: under the 100 ms target, over half of it.
        let middling = Signals {
            deliveries: 100,
            delivery_p99_ms: Some(70.0),
            limit_used: 1.0,
            ..Signals::default()
        };
        assert_eq!(c.step(10 * S, middling), Move::Hold("dead_band"));
        assert!((c.limit() - 0.7).abs() < 1e-9);
    }

    #[test]
    fn throttling_and_a_filling_buffer_are_pressure_too() {
        let mut c = Controller::new(settings());
        let throttled = Signals {
            throttle_ms: 30,
            ..fast(1.0)
        };
        assert_eq!(c.step(0, throttled), Move::Decrease(Cause::Throttle));
        let full = Signals {
            buffer_fill: 0.8,
            ..fast(1.0)
        };
        assert_eq!(c.step(10 * S, full), Move::Decrease(Cause::Buffer));
    }

    #[test]
    fn without_a_configured_target_the_baseline_sets_it() {
        let mut c = Controller::new(AdaptiveConfig {
            enabled: true,
            ..AdaptiveConfig::default()
        });
        assert_eq!(c.target_ms(), None);
        c.step(0, fast(0.1)); // p99 5 ms under load
        assert_eq!(
            c.target_ms(),
            Some(50.0),
            "4 x 5 ms, at least min_target_ms (50)"
        );
        // Too few deliveries say nothing.
        let sparse = Signals {
            deliveries: 3,
            delivery_p99_ms: Some(900.0),
            ..Signals::default()
        };
        assert_eq!(c.step(S, sparse), Move::Hold("ceiling"));
        assert_eq!(c.step(2 * S, slow()), Move::Decrease(Cause::Latency));
    }
}
