//! One lag guard as a pure state machine: offset readings (or failed reads) in, the guard's
//! view out — lag, consumer rate C, producer rate P, recovery time, and whether producers are
//! capped and at what rate. Time comes in with every call, so tests step it.
//!
//! The model: lag L = Σ(end − committed). The consumers drain it at C − P records/s, so the
//! recovery time is L / (C − P), infinite while the lag is not shrinking. A lag the consumers
//! read within `caught_up_s` counts as caught up (committing consumers always trail the log
//! end a little). When the recovery time passes `max_recovery_s` (or L passes
//! `max_lag_records`) producers get a cap of C / headroom — at least the floor — so the lag
//! shrinks; the cap lifts once both fall below `release_fraction` of their limits (hysteresis).
//! When offsets cannot be read, the last cap holds for `hold_s`, then the guard lets go.

use crate::config::LagGuardConfig;

/// One reading of the guarded partitions, summed over the partitions that have a committed
/// offset for the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub at_ns: u64,
    /// Σ end offsets (log end) of those partitions.
    pub end: u64,
    /// Σ committed offsets of the group.
    pub committed: u64,
    /// Σ max(end − committed, 0) per partition.
    pub lag: u64,
}

/// Why the guard is where it is; exported as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not enough readings yet for rates.
    Starting,
    /// Consumers keep up: no cap.
    Idle,
    /// Producers capped at C / headroom (or the floor).
    Capping,
    /// Offsets unreadable: the last cap is kept until `hold_s` has passed.
    Holding,
    /// Offsets unreadable for longer than `hold_s`: no cap (fail open).
    Released,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Starting,
        Phase::Idle,
        Phase::Capping,
        Phase::Holding,
        Phase::Released,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Idle => "idle",
            Phase::Capping => "capping",
            Phase::Holding => "holding",
            Phase::Released => "released",
        }
    }
}

/// A drain slower than this (records/s) is no drain: the recovery time is infinite.
const MIN_DRAIN: f64 = 1e-3;

#[derive(Debug, Clone)]
pub struct Guard {
    config: LagGuardConfig,
    /// Readings over the last `rate_window_s` (and the one just before): rates are taken
    /// across the window, so consumers that commit every few seconds still show a steady C.
    history: std::collections::VecDeque<Reading>,
    /// When the committed offsets last moved forward.
    progress_ns: u64,
    consumer_rate: Option<f64>,
    producer_rate: Option<f64>,
    lag: u64,
    recovery_s: f64,
    capped: bool,
    cap: f64,
    phase: Phase,
    /// When reads started failing (none while they succeed).
    failing_since_ns: Option<u64>,
    /// The last read error, for the log and the admin API.
    pub last_error: Option<String>,
}

impl Guard {
    pub fn new(config: LagGuardConfig) -> Self {
        Self {
            config,
            history: std::collections::VecDeque::new(),
            progress_ns: 0,
            consumer_rate: None,
            producer_rate: None,
            lag: 0,
            recovery_s: 0.0,
            capped: false,
            cap: 0.0,
            phase: Phase::Starting,
            failing_since_ns: None,
            last_error: None,
        }
    }

    pub fn config(&self) -> &LagGuardConfig {
        &self.config
    }

    /// New settings keep the readings and rates; the decision is made again at the next one.
    pub fn set_config(&mut self, config: LagGuardConfig) {
        self.config = config;
    }

    /// The cap on producers (records/s, summed over every tenant and replica) while capping.
    pub fn cap(&self) -> Option<f64> {
        self.capped.then_some(self.cap)
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn lag(&self) -> u64 {
        self.lag
    }

    pub fn recovery_s(&self) -> f64 {
        self.recovery_s
    }

    pub fn consumer_rate(&self) -> f64 {
        self.consumer_rate.unwrap_or(0.0)
    }

    pub fn producer_rate(&self) -> f64 {
        self.producer_rate.unwrap_or(0.0)
    }

    /// A successful reading.
    pub fn read(&mut self, r: Reading) -> Phase {
        self.failing_since_ns = None;
        self.last_error = None;
        self.lag = r.lag;
        let previous = self.history.back().copied();
        if previous.is_none_or(|p| r.committed > p.committed) {
            self.progress_ns = r.at_ns;
        }
        if previous.is_some_and(|p| r.at_ns <= p.at_ns) {
            return self.phase;
        }
        self.history.push_back(r);
        let window_ns = (self.config.rate_window_s * 1e9) as u64;
        while self.history.len() > 2 && r.at_ns - self.history[1].at_ns >= window_ns {
            self.history.pop_front();
        }
        let Some(&first) = self.history.front().filter(|_| self.history.len() >= 2) else {
            self.phase = if self.capped {
                Phase::Capping
            } else {
                Phase::Starting
            };
            return self.phase;
        };
        let secs = (r.at_ns - first.at_ns) as f64 / 1e9;
        // Offsets that go back (a reset group, a recreated topic) carry no rate: count 0.
        let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
        let stopped = r.lag > 0
            && r.at_ns.saturating_sub(self.progress_ns) as f64 / 1e9 >= self.config.stopped_after_s;
        let c = if stopped {
            0.0
        } else {
            rate(r.committed, first.committed)
        };
        let p = rate(r.end, first.end);
        self.consumer_rate = Some(c);
        self.producer_rate = Some(p);
        self.recovery_s = recovery_s(r.lag, c, p, self.config.caught_up_s);

        let over = |limit: f64, value: f64, fraction: f64| value > limit * fraction;
        let lag_over = |fraction: f64| {
            self.config
                .max_lag_records
                .is_some_and(|m| over(m as f64, r.lag as f64, fraction))
        };
        let trigger = over(self.config.max_recovery_s, self.recovery_s, 1.0) || lag_over(1.0);
        let f = self.config.release_fraction;
        let still = over(self.config.max_recovery_s, self.recovery_s, f) || lag_over(f);
        self.capped = if self.capped { still } else { trigger };
        if self.capped {
            self.cap = (c / self.config.headroom).max(self.config.floor_records_per_sec as f64);
        }
        self.phase = if self.capped {
            Phase::Capping
        } else {
            Phase::Idle
        };
        self.phase
    }

    /// A failed reading: the cap in force holds for `hold_s` from the first failure, then
    /// lifts; rates start afresh once offsets can be read again.
    pub fn unreadable(&mut self, now_ns: u64, error: String) -> Phase {
        let since = *self.failing_since_ns.get_or_insert(now_ns);
        self.last_error = Some(error);
        self.history.clear();
        self.consumer_rate = None;
        self.producer_rate = None;
        let held = now_ns.saturating_sub(since) as f64 / 1e9;
        if held >= self.config.hold_s {
            self.capped = false;
        }
        self.phase = if self.capped {
            Phase::Holding
        } else {
            Phase::Released
        };
        self.phase
    }

    /// How long a refused producer should wait when the cap admits nothing: one interval.
    pub fn interval_ns(&self) -> u64 {
        self.config.interval_ms.saturating_mul(1_000_000)
    }
}

/// The time to drain `lag` at net rate C − P; 0 when caught up, infinite when not draining.
pub fn recovery_s(lag: u64, consumer: f64, producer: f64, caught_up_s: f64) -> f64 {
    let lag = lag as f64;
    if lag <= consumer * caught_up_s {
        return 0.0;
    }
    let drain = consumer - producer;
    if drain > MIN_DRAIN {
        lag / drain
    } else {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn config() -> LagGuardConfig {
        LagGuardConfig {
            name: "g".into(),
            topics: vec!["orders".into()],
            group: "G".into(),
            max_recovery_s: 60.0,
            max_lag_records: None,
            headroom: 1.2,
            interval_ms: 1000,
            floor_records_per_sec: 0,
            release_fraction: 0.5,
            caught_up_s: 2.0,
            hold_s: 10.0,
            rate_window_s: 3.0,
            stopped_after_s: 3.0,
        }
    }

    /// A scripted topic: producers append `p`/s, consumers commit `c`/s (never past the end).
    struct Script {
        at: u64,
        end: u64,
        committed: u64,
    }

    impl Script {
        fn step(&mut self, guard: &mut Guard, p: u64, c: u64) -> Phase {
            self.at += S;
            self.end += p;
            self.committed = (self.committed + c).min(self.end);
            guard.read(Reading {
                at_ns: self.at,
                end: self.end,
                committed: self.committed,
                lag: self.end - self.committed,
            })
        }
    }

    fn script() -> (Guard, Script) {
        let mut g = Guard::new(config());
        let mut s = Script {
            at: 0,
            end: 0,
            committed: 0,
        };
        assert_eq!(s.step(&mut g, 0, 0), Phase::Starting);
        (g, s)
    }

    #[test]
    fn rates_are_rates_of_change_and_recovery_is_lag_over_net_drain() {
        let (mut g, mut s) = script();
        // Build 10,000 of lag, then drain it at 1,000 − 600 = 400/s.
        s.step(&mut g, 10_000, 0);
        for _ in 0..14 {
            s.step(&mut g, 600, 1_000);
        }
        // Rates over the 3 s window.
        assert!(
            (g.consumer_rate() - 1_000.0).abs() < 1e-6,
            "{}",
            g.consumer_rate()
        );
        assert!(
            (g.producer_rate() - 600.0).abs() < 1e-6,
            "{}",
            g.producer_rate()
        );
        let expected = g.lag() as f64 / (g.consumer_rate() - g.producer_rate());
        assert!((g.recovery_s() - expected).abs() < 1e-9);
        assert_eq!(recovery_s(5_000, 100.0, 100.0, 2.0), f64::INFINITY);
        assert_eq!(recovery_s(5_000, 100.0, 300.0, 2.0), f64::INFINITY);
        assert_eq!(recovery_s(150, 100.0, 300.0, 2.0), 0.0, "caught up");
    }

    #[test]
    fn a_growing_lag_caps_producers_at_consumer_rate_over_headroom() {
        let (mut g, mut s) = script();
        // Consumers at 500/s, producers at 3,000/s: the lag grows, recovery is infinite.
        assert_eq!(s.step(&mut g, 3_000, 500), Phase::Capping);
        for _ in 0..5 {
            s.step(&mut g, 3_000, 500);
        }
        let cap = g.cap().expect("capping");
        assert!((cap - 500.0 / 1.2).abs() < 1.0, "cap {cap}");
    }

    #[test]
    fn the_cap_lifts_with_hysteresis() {
        let (mut g, mut s) = script();
        s.step(&mut g, 40_000, 0);
        // 40,000 of lag draining at 1,000 − 400 = 600/s: ~67 s > 60 s → capped.
        for _ in 0..3 {
            s.step(&mut g, 400, 1_000);
        }
        assert_eq!(g.phase(), Phase::Capping, "recovery {}", g.recovery_s());
        // Below 60 s but above 30 s (release_fraction 0.5): still capped.
        loop {
            let phase = s.step(&mut g, 400, 1_000);
            if g.recovery_s() > 30.0 {
                assert_eq!(phase, Phase::Capping, "recovery {}", g.recovery_s());
            } else {
                // Under 30 s it lifts.
                assert_eq!(phase, Phase::Idle, "recovery {}", g.recovery_s());
                break;
            }
        }
        assert_eq!(g.cap(), None);
        // And does not come back while the recovery time stays under the limit.
        for _ in 0..5 {
            assert_eq!(s.step(&mut g, 400, 1_000), Phase::Idle);
        }
    }

    #[test]
    fn max_lag_records_triggers_on_its_own() {
        let mut c = config();
        c.max_lag_records = Some(5_000);
        c.max_recovery_s = 3_600.0;
        let mut g = Guard::new(c);
        // 8,000 of lag before the first reading; consumers drain it at 2,000 − 100/s, so the
        // recovery time (~4 s) never passes an hour: only the lag limit acts.
        let mut s = Script {
            at: 0,
            end: 8_000,
            committed: 0,
        };
        s.step(&mut g, 0, 0);
        assert_eq!(s.step(&mut g, 100, 2_000), Phase::Capping);
        assert!(g.recovery_s() < 10.0, "{}", g.recovery_s());
        // Still over 2,500 (release_fraction 0.5 of 5,000): capped.
        assert_eq!(
            s.step(&mut g, 100, 2_000),
            Phase::Capping,
            "lag {}",
            g.lag()
        );
        // Under 2,500: lifted.
        assert_eq!(s.step(&mut g, 100, 2_000), Phase::Idle, "lag {}", g.lag());
    }

    #[test]
    fn stopped_consumers_cap_at_the_floor() {
        let (mut g, mut s) = script();
        for _ in 0..4 {
            s.step(&mut g, 1_000, 600);
        }
        assert_eq!(g.cap(), Some(500.0));
        // The consumers stop: for stopped_after_s (3 s) the window still shows their rate...
        s.step(&mut g, 1_000, 0);
        s.step(&mut g, 1_000, 0);
        assert!(g.cap().is_some_and(|c| c > 0.0), "{:?}", g.cap());
        // ...then C is 0 and the cap is the floor, exactly.
        s.step(&mut g, 1_000, 0);
        assert_eq!((g.consumer_rate(), g.cap()), (0.0, Some(0.0)));
        assert_eq!(g.recovery_s(), f64::INFINITY);
        let mut c = config();
        c.floor_records_per_sec = 50;
        g.set_config(c);
        s.step(&mut g, 1_000, 0);
        assert_eq!(g.cap(), Some(50.0));
        // Consumers back: the cap follows them again.
        s.step(&mut g, 0, 3_000);
        assert!(g.consumer_rate() > 0.0);
    }

    #[test]
    fn unreadable_offsets_hold_the_cap_then_release_it() {
        let (mut g, mut s) = script();
        for _ in 0..3 {
            s.step(&mut g, 3_000, 500);
        }
        let cap = g.cap().expect("capping");
        let t0 = s.at + S;
        assert_eq!(g.unreadable(t0, "group unknown".into()), Phase::Holding);
        assert_eq!(g.unreadable(t0 + 9 * S, "x".into()), Phase::Holding);
        assert_eq!(g.cap(), Some(cap), "the last cap holds");
        assert_eq!(g.unreadable(t0 + 10 * S, "x".into()), Phase::Released);
        assert_eq!(g.cap(), None, "fail open after hold_s");
        // Readable again: rates start afresh (one reading is not enough for a decision).
        s.at = t0 + 11 * S;
        assert_eq!(s.step(&mut g, 0, 0), Phase::Starting);
        assert_eq!(s.step(&mut g, 3_000, 500), Phase::Capping);
    }

    #[test]
    fn an_idle_guard_that_cannot_read_is_released_at_once() {
        let (mut g, _) = script();
        assert_eq!(g.unreadable(5 * S, "broker down".into()), Phase::Released);
        assert_eq!(g.last_error.as_deref(), Some("broker down"));
    }
}
