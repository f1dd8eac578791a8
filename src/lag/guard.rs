//! One lag guard as a pure state machine: offset readings (or failed reads) in, the guard's
//! view out — lag, consumer rate C, producer rate P, recovery time, and whether producers are
//! capped and at what rate. Time comes in with every call, so tests step it.
//!
//! The model: lag L = Σ(end − committed). The consumers drain it at C − P records/s, so the
//! recovery time is L / (C − P), infinite while the lag is not shrinking. A lag the consumers
//! read within `caught_up_s` counts as caught up (committing consumers always trail the log
//! end a little). When the recovery time passes `max_recovery_s` (or L passes
//! `max_lag_records`) producers get a cap; how high it is and when it lifts is
//! [`release`]'s rule: it follows the lag down and rises again in steps, and lifts only once
//! the demand producers offer is shown to fit, so a consumer slower than demand is capped
//! once and for as long as it is slower — no surge per drain cycle.
//!
//! Rates are per partition: each partition's C and P are its own offsets' growth across the
//! readings of the window that carried both its end and committed offsets, and the guard's
//! rates are their sums. A partition that appears (a new topic matching, a group that starts
//! committing), disappears (a deleted topic, expired group offsets, an error for it in one
//! answer) or goes back (an offset reset, a recreated topic) contributes nothing to the rates
//! until it has two readings again — never a difference between sums over different sets of
//! partitions. L counts the partitions that have a rate.
//!
//! When offsets cannot be read, the last cap holds for `hold_s`, then the guard lets go.

mod reason;
pub mod release;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

pub use release::{Blocker, CapBasis};

use crate::config::LagGuardConfig;

/// One partition's offsets in one reading; either may be missing (an error in that part of
/// the answer, no commit by the group yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub topic: Arc<str>,
    pub partition: i32,
    /// The log-end offset.
    pub end: Option<u64>,
    /// The group's committed offset.
    pub committed: Option<u64>,
}

impl PartitionOffsets {
    pub fn new(topic: &str, partition: i32, end: Option<u64>, committed: Option<u64>) -> Self {
        Self {
            topic: topic.into(),
            partition,
            end,
            committed,
        }
    }
}

/// One reading of the guarded partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    pub at_ns: u64,
    pub partitions: Vec<PartitionOffsets>,
    /// Records floodgate's tenants offered to the guarded topics on this replica, ever
    /// (admitted or refused): the demand a release would let through.
    pub offered: u64,
    /// Replicas offering alike (cluster mode): this one's demand times this is the whole.
    pub replicas: u32,
}

impl Reading {
    /// A reading of one partition ("t", 0) with both offsets: what most tests need.
    pub fn one(at_ns: u64, end: u64, committed: u64, offered: u64) -> Self {
        Self {
            at_ns,
            partitions: vec![PartitionOffsets::new("t", 0, Some(end), Some(committed))],
            offered,
            replicas: 1,
        }
    }
}

/// One partition's readings over the window: (at, end, committed).
#[derive(Debug, Clone, Default)]
struct Track {
    samples: VecDeque<(u64, u64, u64)>,
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
    /// Per partition, its readings over the last `rate_window_s` (and the one just before):
    /// rates are taken across the window, so consumers that commit every few seconds still
    /// show a steady C.
    partitions: HashMap<(Arc<str>, i32), Track>,
    /// (at, offered) over the same window, for D.
    offered: VecDeque<(u64, u64)>,
    /// When the last reading was taken.
    last_at_ns: Option<u64>,
    /// Partitions with a rate at the last reading, and ones in it without both offsets.
    measured: usize,
    unmeasured: usize,
    /// The lag per topic over the partitions with a rate.
    by_topic: Vec<(String, u64)>,
    /// When the committed offsets last moved forward.
    progress_ns: u64,
    consumer_rate: Option<f64>,
    producer_rate: Option<f64>,
    /// D: what floodgate's producers offered to the guarded topics (all replicas), records/s.
    offered_rate: Option<f64>,
    lag: u64,
    recovery_s: f64,
    capped: bool,
    cap: f64,
    basis: CapBasis,
    blocker: Option<Blocker>,
    /// Since when the cap in force has admitted all that was offered (none while it binds),
    /// and the lag's trend since then.
    unbound_since_ns: Option<u64>,
    trend: release::Trend,
    phase: Phase,
    /// When reads started failing (none while they succeed), and for how long they had at
    /// the last failure.
    failing_since_ns: Option<u64>,
    failing_s: f64,
    /// The last read error, for the log and the admin API.
    pub last_error: Option<String>,
}

impl Guard {
    pub fn new(config: LagGuardConfig) -> Self {
        Self {
            config,
            partitions: HashMap::new(),
            offered: VecDeque::new(),
            last_at_ns: None,
            measured: 0,
            unmeasured: 0,
            by_topic: Vec::new(),
            progress_ns: 0,
            consumer_rate: None,
            producer_rate: None,
            offered_rate: None,
            lag: 0,
            recovery_s: 0.0,
            capped: false,
            cap: 0.0,
            basis: CapBasis::Drain,
            blocker: None,
            unbound_since_ns: None,
            trend: release::Trend::default(),
            phase: Phase::Starting,
            failing_since_ns: None,
            failing_s: 0.0,
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

    pub fn offered_rate(&self) -> f64 {
        self.offered_rate.unwrap_or(0.0)
    }

    /// The lag per topic, over the partitions with a rate.
    pub fn lag_by_topic(&self) -> &[(String, u64)] {
        &self.by_topic
    }

    /// Partitions with a rate at the last reading, and partitions in it that lacked an end or
    /// committed offset (an error for them, or no commit yet).
    pub fn partitions(&self) -> (usize, usize) {
        (self.measured, self.unmeasured)
    }

    /// What set the cap, while capping.
    pub fn basis(&self) -> Option<CapBasis> {
        self.capped.then_some(self.basis)
    }

    /// Why the cap is not lifted yet, while capping on readable offsets.
    pub fn blocker(&self) -> Option<Blocker> {
        self.blocker.filter(|_| self.phase == Phase::Capping)
    }

    /// A successful reading: tracked, measured, and the cap decided on what it shows.
    pub fn read(&mut self, r: Reading) -> Phase {
        self.failing_since_ns = None;
        self.last_error = None;
        if self.last_at_ns.is_some_and(|p| r.at_ns <= p) {
            return self.phase;
        }
        let (at_ns, replicas) = (r.at_ns, r.replicas);
        self.track(r);
        let (c, p, lag) = self.measure();
        if self.measured == 0 {
            // Nothing has two readings yet: no rates, no decision (a cap in force stays).
            self.phase = if self.capped {
                Phase::Capping
            } else {
                Phase::Starting
            };
            return self.phase;
        }
        self.decide(at_ns, replicas, c, p, lag)
    }

    /// Adds the reading to each partition's track and to the offered window, each trimmed to
    /// the window; notes whether the committed offsets moved.
    fn track(&mut self, r: Reading) {
        let first_reading = self.last_at_ns.is_none();
        self.last_at_ns = Some(r.at_ns);
        let window_ns = (self.config.rate_window_s * 1e9) as u64;
        let mut progressed = first_reading;
        self.unmeasured = 0;
        for p in r.partitions {
            let (Some(end), Some(committed)) = (p.end, p.committed) else {
                // Its last readings stay: one answer missing it changes no rate.
                self.unmeasured += 1;
                continue;
            };
            // Committing consumers may be ahead of a wrong watermark: count no more than the end.
            let committed = committed.min(end);
            let track = self.partitions.entry((p.topic, p.partition)).or_default();
            if let Some(&(_, e, c)) = track.samples.back() {
                if end < e || committed < c {
                    // Reset, recreated: its rate starts afresh from here.
                    track.samples.clear();
                } else if committed > c {
                    progressed = true;
                }
            }
            track.samples.push_back((r.at_ns, end, committed));
        }
        // Trim every partition to the window; forget one not read for a whole window.
        self.partitions.retain(|_, t| {
            while t.samples.len() > 2 && r.at_ns - t.samples[1].0 >= window_ns {
                t.samples.pop_front();
            }
            t.samples
                .back()
                .is_some_and(|(at, ..)| r.at_ns - at <= window_ns)
        });
        self.offered.push_back((r.at_ns, r.offered));
        while self.offered.len() > 2 && r.at_ns - self.offered[1].0 >= window_ns {
            self.offered.pop_front();
        }
        if progressed {
            self.progress_ns = r.at_ns;
        }
    }

    /// Rates C and P, each partition's own over its readings, summed, and the lag of those
    /// partitions (in all and per topic); `measured` says how many partitions had a rate.
    fn measure(&mut self) -> (f64, f64, u64) {
        let (mut c, mut p, mut lag, mut measured) = (0.0f64, 0.0f64, 0u64, 0usize);
        let mut by_topic: HashMap<&str, u64> = HashMap::new();
        for ((topic, _), t) in &self.partitions {
            let (Some(&(t0, e0, c0)), Some(&(t1, e1, c1))) = (t.samples.front(), t.samples.back())
            else {
                continue;
            };
            if t1 <= t0 {
                continue;
            }
            let secs = (t1 - t0) as f64 / 1e9;
            c += (c1 - c0) as f64 / secs;
            p += (e1 - e0) as f64 / secs;
            let l = e1 - c1;
            lag = lag.saturating_add(l);
            *by_topic.entry(topic).or_default() += l;
            measured += 1;
        }
        let mut topics: Vec<(String, u64)> = by_topic
            .into_iter()
            .map(|(t, l)| (t.to_string(), l))
            .collect();
        topics.sort();
        self.by_topic = topics;
        self.measured = measured;
        (c, p, lag)
    }

    /// Whether producers are capped, and at what, on the rates measured at `at_ns` (D from the
    /// offered window, this replica's times `replicas`).
    fn decide(&mut self, at_ns: u64, replicas: u32, c: f64, p: f64, lag: u64) -> Phase {
        self.lag = lag;
        let d = match (self.offered.front(), self.offered.back()) {
            (Some(&(t0, o0)), Some(&(t1, o1))) if t1 > t0 => {
                o1.saturating_sub(o0) as f64 / ((t1 - t0) as f64 / 1e9) * f64::from(replicas.max(1))
            }
            _ => 0.0,
        };
        let stopped = lag > 0
            && at_ns.saturating_sub(self.progress_ns) as f64 / 1e9 >= self.config.stopped_after_s;
        let c = if stopped { 0.0 } else { c };
        self.consumer_rate = Some(c);
        self.producer_rate = Some(p);
        self.offered_rate = Some(d);
        self.recovery_s = recovery_s(lag, c, p, self.config.caught_up_s);
        let over_lag = |m: u64| lag as f64 > m as f64;
        let trigger = self.recovery_s > self.config.max_recovery_s
            || self.config.max_lag_records.is_some_and(over_lag);
        let prev = self.capped.then_some(self.cap);
        if prev.is_some_and(|cap| d <= cap) {
            let since = *self.unbound_since_ns.get_or_insert(at_ns);
            self.trend
                .add(at_ns.saturating_sub(since) as f64 / 1e9, lag as f64);
        } else {
            self.unbound_since_ns = None;
            self.trend = release::Trend::default();
        }
        let now = release::Now {
            lag,
            consumer: c,
            producer: p,
            offered: d,
            cap: prev,
            unbound_s: self
                .unbound_since_ns
                .map_or(0.0, |t| at_ns.saturating_sub(t) as f64 / 1e9),
            growth: self.trend.bounds(),
        };
        let blocker = release::blocker(&self.config, &now);
        self.capped = if self.capped {
            blocker.is_some()
        } else {
            trigger
        };
        self.blocker = blocker.filter(|_| self.capped);
        if self.capped {
            (self.cap, self.basis) = release::cap(&self.config, &now);
        } else {
            self.unbound_since_ns = None;
            self.trend = release::Trend::default();
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
        self.partitions.clear();
        self.offered.clear();
        self.last_at_ns = None;
        self.measured = 0;
        self.by_topic.clear();
        self.consumer_rate = None;
        self.producer_rate = None;
        self.unbound_since_ns = None;
        self.trend = release::Trend::default();
        let held = now_ns.saturating_sub(since) as f64 / 1e9;
        self.failing_s = held;
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
mod tests;
