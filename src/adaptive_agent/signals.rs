//! What a tick reads: the tenants' and Kafka's counters now, and from them and the last tick's
//! the signals the controller steps on.
//!
//! The latency signal is the delivery p90 of the requests Kafka answered since the last tick
//! (its window: one `interval_ms`; an interval of fewer than `MIN_DELIVERIES` is merged into
//! the next, up to `MAX_WINDOW_INTERVALS`, so a quiet path is measured over a longer window,
//! not left unwatched), from an HDR histogram at 1 % resolution
//! (`kafka::DeliveryLatency`). The p50, p99 and slowest are read from the same window for
//! the admin API and the status page. librdkafka's own windows (`int_latency`, `outbuf_latency`,
//! `rtt`) come every `statistics.interval.ms` (5 s) as averages over it: they say where the
//! time went (shown beside), too late and too coarse to steer a half-second loop.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::stats::Reading;
use super::{AdaptiveAgent, Ceiling};
use crate::adaptive::controller::{
    Signals, LONGEST_WINDOW_INTERVALS, MAX_WINDOW_INTERVALS, MIN_DELIVERIES, MIN_FEW_DELIVERIES,
};
use crate::kafka::LatencyWindow;
use crate::refusal::Reason;
use crate::tenant::Tenant;

/// The counters at one tick: totals since they started (a tick takes differences).
#[derive(Debug)]
pub(super) struct Counts {
    /// Offered records and bytes of every tenant that ever offered anything.
    pub(super) offered: HashMap<String, (u64, u64)>,
    pub(super) admitted_records: u64,
    pub(super) admitted_bytes: u64,
    /// Requests the adaptive limit refused.
    pub(super) refused: u64,
}

/// Counters as they were at the last tick.
#[derive(Debug, Default)]
pub(super) struct Previous {
    at_ns: u64,
    pub(super) tenants: HashMap<String, Seen>,
    admitted_records: u64,
    admitted_bytes: u64,
    refused: u64,
    /// Since when records have been waiting (held in the buffer at every tick since), and the
    /// last tick whose interval delivered something: how long nothing was delivered while
    /// records waited is a lower bound on the age of the oldest record in flight.
    waiting_since_ns: Option<u64>,
    delivered_at_ns: u64,
    /// Deliveries of the last intervals, too few to read alone, and how many intervals they
    /// span: merged into the next.
    pending: Option<(LatencyWindow, u32)>,
}

impl Previous {
    /// This interval's deliveries, with those of the intervals before it that were too few to
    /// read (and how many intervals that spans); kept to merge into the next when still too
    /// few.
    fn window(&mut self, now: LatencyWindow) -> (LatencyWindow, u32) {
        let (mut window, mut spans) = (now, 1);
        if let Some((earlier, k)) = self.pending.take() {
            // Windows share their bounds, so adding cannot fail; if it did, this interval
            // alone is read.
            if window.add(&earlier).is_ok() {
                spans = k.saturating_add(1);
            }
        }
        // Under MIN_DELIVERIES a window grows to MAX_WINDOW_INTERVALS; under
        // MIN_FEW_DELIVERIES on to LONGEST_WINDOW_INTERVALS (1 delivery/s is read every 5 s,
        // not thrown away every 4).
        let n = window.count();
        let grows = (n < MIN_DELIVERIES && spans < MAX_WINDOW_INTERVALS)
            || (n < MIN_FEW_DELIVERIES && spans < LONGEST_WINDOW_INTERVALS);
        if grows {
            self.pending = Some((window.clone(), spans));
        }
        (window, spans)
    }

    /// Forgets deliveries kept for merging (the agent was switched off meanwhile).
    pub(super) fn forget_window(&mut self) {
        self.pending = None;
    }

    /// Seconds since the last tick (at least a millisecond).
    pub(super) fn secs(&self, now: u64) -> f64 {
        (now.saturating_sub(self.at_ns) as f64 / 1e9).max(1e-3)
    }

    /// Records waiting at this tick and every one since `waiting_since`, and nothing
    /// delivered since `delivered_at`: the oldest of them has waited at least this long (ms).
    fn stalled_ms(&mut self, now: u64, delivered: bool, waiting: bool) -> f64 {
        if delivered {
            self.delivered_at_ns = now;
        }
        match (waiting, self.waiting_since_ns) {
            (false, _) => {
                self.waiting_since_ns = None;
                0.0
            }
            (true, None) => {
                self.waiting_since_ns = Some(now);
                0.0
            }
            (true, Some(since)) => {
                let from = since.max(self.delivered_at_ns);
                now.saturating_sub(from) as f64 / 1e6
            }
        }
    }

    /// This tick's counters become the last tick's.
    pub(super) fn remember(&mut self, now: u64, counts: Counts, tenants: HashMap<String, Seen>) {
        self.at_ns = now;
        self.tenants = tenants;
        self.admitted_records = counts.admitted_records;
        self.admitted_bytes = counts.admitted_bytes;
        self.refused = counts.refused;
    }
}

/// The quantile the controller follows.
const FOLLOWED: f64 = 0.9;

/// A window's deliveries read out.
fn read(now: &LatencyWindow, intervals: u32) -> Reading {
    Reading {
        deliveries: now.count(),
        intervals,
        p50_ms: now.quantile_ms(0.5),
        p90_ms: now.quantile_ms(FOLLOWED),
        p99_ms: now.quantile_ms(0.99),
        max_ms: now.quantile_ms(1.0),
    }
}

impl AdaptiveAgent {
    /// The counters now, of `tenants` (the registry in force) and of Kafka's deliveries.
    pub(super) fn counts<'a>(&self, tenants: impl Iterator<Item = &'a Arc<Tenant>>) -> Counts {
        let mut counts = Counts {
            offered: HashMap::new(),
            admitted_records: 0,
            admitted_bytes: 0,
            refused: 0,
        };
        for t in tenants {
            let Some(stats) = t.stats_if_any() else {
                continue; // never offered anything
            };
            counts.offered.insert(
                t.id.as_str().to_string(),
                (
                    stats.offered_records.load(Relaxed),
                    stats.offered_bytes.load(Relaxed),
                ),
            );
            counts.admitted_records += stats.admitted_records.load(Relaxed);
            counts.admitted_bytes += stats.admitted_bytes.load(Relaxed);
            counts.refused += stats.rejected_count(Reason::Adaptive);
        }
        counts
    }

    /// The signals of the interval since the last tick (noting in `previous` since when
    /// records have waited, and keeping this interval's latencies for the next evidence
    /// window); `limit` is the limit that was in force over it. Also what was read of the
    /// latencies, for the admin API.
    pub(super) fn signals(
        &self,
        now: u64,
        counts: &Counts,
        previous: &mut Previous,
        ceiling: Ceiling,
        limit: f64,
    ) -> (Signals, Reading) {
        let secs = previous.secs(now);
        let fresh = self.kafka.delivery_latency.take();
        let delivered = fresh.count() > 0;
        let (window, window_intervals) = previous.window(fresh);
        let reading = read(&window, window_intervals);
        let deliveries = window.count();
        let buffer = &self.admission.buffer;
        let (held_bytes, held_records) = buffer.held();
        let fill = (held_bytes as f64 / buffer.max_bytes().max(1) as f64)
            .max(held_records as f64 / buffer.max_records().max(1) as f64);
        let waiting = held_records > 0 || held_bytes > 0;
        let stalled_ms = previous.stalled_ms(now, delivered, waiting);
        let used = |admitted: u64, before: u64, ceiling: Option<u64>| {
            ceiling.map_or(0.0, |c| {
                admitted.saturating_sub(before) as f64 / secs / (c as f64 * limit).max(1.0)
            })
        };
        let throttle = self
            .kafka
            .latest()
            .brokers
            .iter()
            .map(|b| b.throttle_ms)
            .max()
            .unwrap_or(0);
        let signals = Signals {
            deliveries,
            latency_ms: reading.p90_ms,
            throttle_ms: throttle,
            buffer_fill: fill,
            stalled_ms,
            limit_used: used(
                counts.admitted_records,
                previous.admitted_records,
                ceiling.records,
            )
            .max(used(
                counts.admitted_bytes,
                previous.admitted_bytes,
                ceiling.bytes,
            )),
            refused: counts.refused.saturating_sub(previous.refused),
            window_intervals,
        };
        (signals, reading)
    }
}

/// One tenant as the last tick saw it.
#[derive(Debug, Default, Clone)]
pub(super) struct Seen {
    /// Offered records and bytes, ever.
    pub(super) records: u64,
    pub(super) bytes: u64,
    /// Remembered demand, per second, in the dimension the ceiling counts first.
    pub(super) demand: f64,
}
