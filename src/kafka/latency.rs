//! Delivery latency at a resolution a controller can act on: an HDR histogram (values kept
//! within 1 % from 1 µs to 10 minutes) of each request's time from enqueue to its last
//! record's delivery report, taken a window at a time.
//!
//! The power-of-two buckets of the Prometheus histogram (`delivery_seconds`) and of
//! [`super::LatencyCounts`] read 33 ms and 64 ms alike: fine for a dashboard's tail, useless
//! for telling a path that wanders between 20 and 40 ms from one that is twice as slow.
//!
//! The delivery path records (librdkafka's polling thread, one lock per request, never held
//! for more than a histogram update); the one reader (the adaptive agent) takes the window
//! recorded since its last take, which starts the next one empty.

use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

/// The values kept: 1 µs to 10 minutes (longer ones count as 10 minutes), two significant
/// digits — a value is known within 1 % (1/128 at worst).
const LOWEST_US: u64 = 1;
const HIGHEST_US: u64 = 600_000_000;
const SIGNIFICANT_DIGITS: u8 = 2;

/// The resolution, as a fraction of a value: two readings closer than this may be one.
pub const RESOLUTION: f64 = 1.0 / 128.0;

/// Delivery latencies of the window being recorded.
#[derive(Debug)]
pub struct DeliveryLatency {
    window: Mutex<Histogram<u64>>,
}

impl Default for DeliveryLatency {
    fn default() -> Self {
        Self {
            window: Mutex::new(empty()),
        }
    }
}

fn empty() -> Histogram<u64> {
    // The bounds are constants within hdrhistogram's limits: this cannot fail.
    Histogram::new_with_bounds(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

impl DeliveryLatency {
    pub fn record(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(LOWEST_US, HIGHEST_US);
        self.lock().saturating_record(us);
    }

    /// What was recorded since the last take; the next window starts empty.
    pub fn take(&self) -> LatencyWindow {
        let mut window = self.lock();
        let taken = window.clone();
        window.reset();
        LatencyWindow(taken)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Histogram<u64>> {
        self.window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One window's delivery latencies.
#[derive(Debug, Clone)]
pub struct LatencyWindow(Histogram<u64>);

impl Default for LatencyWindow {
    fn default() -> Self {
        Self(empty())
    }
}

impl LatencyWindow {
    /// Requests delivered in the window.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// Adds `other`'s deliveries to this window (windows of one process share their bounds).
    pub fn add(
        &mut self,
        other: &LatencyWindow,
    ) -> Result<(), hdrhistogram::errors::AdditionError> {
        self.0.add(&other.0)
    }

    /// The `q` quantile in ms (within [`RESOLUTION`]); `None` for an empty window.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        (self.count() > 0).then(|| self.0.value_at_quantile(q) as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_a_power_of_two_apart_in_the_old_buckets_are_told_apart() {
        let latency = DeliveryLatency::default();
        for _ in 0..99 {
            latency.record(Duration::from_micros(33_000));
        }
        latency.record(Duration::from_millis(40));
        let w = latency.take();
        assert_eq!(w.count(), 100);
        let p50 = w.quantile_ms(0.5).expect("p50");
        assert!((p50 - 33.0).abs() <= 33.0 * RESOLUTION, "{p50}");
        let p100 = w.quantile_ms(1.0).expect("max");
        assert!((p100 - 40.0).abs() <= 40.0 * RESOLUTION, "{p100}");
        // 33 ms and 64 ms: one power-of-two bucket, two readings here.
        let other = DeliveryLatency::default();
        other.record(Duration::from_millis(64));
        let p = other.take().quantile_ms(0.99).expect("p99");
        assert!((p - 64.0).abs() <= 64.0 * RESOLUTION && p > 40.0, "{p}");
    }

    #[test]
    fn a_take_starts_the_next_window_empty() {
        let latency = DeliveryLatency::default();
        latency.record(Duration::from_millis(5));
        assert_eq!(latency.take().count(), 1);
        let w = latency.take();
        assert_eq!(w.count(), 0);
        assert_eq!(w.quantile_ms(0.99), None);
    }

    #[test]
    fn out_of_range_values_are_kept_at_the_bounds() {
        let latency = DeliveryLatency::default();
        latency.record(Duration::ZERO);
        latency.record(Duration::from_secs(3600));
        let w = latency.take();
        assert_eq!(w.count(), 2);
        assert!(w.quantile_ms(1.0).expect("max") >= 599_000.0);
    }
}
