//! What the Kafka side reports about itself: delivery latency and errors (written by the
//! delivery path) and librdkafka's periodic statistics (queue depth, per-broker in-flight
//! requests, round-trip and throttle times). The metrics module reads these at scrape time.

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use rdkafka::Statistics;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// librdkafka's error name, snake_case (a closed set).
    pub code: String,
}

/// One broker as the last statistics saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerStats {
    pub name: String,
    /// Requests sent and not answered, plus requests waiting to be sent.
    pub inflight_requests: i64,
    /// Average round-trip time, microseconds.
    pub rtt_us: i64,
    /// Average quota throttle time, milliseconds.
    pub throttle_ms: i64,
    /// Where a record's delivery time goes, from librdkafka's own windows over the last
    /// statistics interval: in its queue until a request carries it (`int_latency`: linger,
    /// and a backlog when more is offered than the connection's in-flight requests carry), the
    /// request waiting to be sent (`outbuf_latency`), and the broker's round trip (`rtt`).
    pub int_latency: Spread,
    pub outbuf_latency: Spread,
    pub rtt: Spread,
}

/// The median and p99 of one of librdkafka's windows, microseconds (0: none measured).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spread {
    pub p50_us: i64,
    pub p99_us: i64,
}

impl Spread {
    fn of(window: Option<&rdkafka::statistics::Window>) -> Self {
        window.map_or_else(Self::default, |w| Self {
            p50_us: w.p50,
            p99_us: w.p99,
        })
    }
}

/// The last librdkafka statistics we received (every `statistics.interval.ms`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KafkaStats {
    pub queue_messages: u64,
    pub queue_bytes: u64,
    pub brokers: Vec<BrokerStats>,
}

impl KafkaStats {
    pub fn from_statistics(statistics: &Statistics) -> Self {
        let brokers = statistics
            .brokers
            .values()
            .filter(|b| b.nodeid >= 0)
            .map(|b| BrokerStats {
                name: b.name.clone(),
                inflight_requests: b.outbuf_cnt + b.waitresp_cnt,
                rtt_us: b.rtt.as_ref().map_or(0, |w| w.avg),
                throttle_ms: b.throttle.as_ref().map_or(0, |w| w.avg),
                int_latency: Spread::of(b.int_latency.as_ref()),
                outbuf_latency: Spread::of(b.outbuf_latency.as_ref()),
                rtt: Spread::of(b.rtt.as_ref()),
            })
            .collect();
        Self {
            queue_messages: statistics.msg_cnt,
            queue_bytes: statistics.msg_size,
            brokers,
        }
    }
}

/// Metrics written by the Kafka delivery path; cloned handles share the same series.
#[derive(Debug, Clone)]
pub struct KafkaMetrics {
    pub delivery_seconds: Histogram,
    /// The same observations, countable from here (prometheus-client keeps its buckets
    /// private): the status page's windowed percentiles.
    pub delivery_counts: Arc<LatencyCounts>,
    /// The same observations at 1 % resolution, a window at a time: the adaptive controller's
    /// signal.
    pub delivery_latency: Arc<super::DeliveryLatency>,
    pub delivery_errors: Family<ErrorLabels, Counter>,
    pub stats: Arc<Mutex<KafkaStats>>,
}

impl Default for KafkaMetrics {
    fn default() -> Self {
        let delivery_errors = Family::<ErrorLabels, Counter>::default();
        // The known codes' series exist at 0 from the first scrape.
        for code in super::delivery::known_failure_codes() {
            let _ = delivery_errors.get_or_create(&ErrorLabels { code });
        }
        Self {
            // 0.5 ms to ~32 s.
            delivery_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 17)),
            delivery_counts: Arc::default(),
            delivery_latency: Arc::default(),
            delivery_errors,
            stats: Arc::default(),
        }
    }
}

/// Delivery latencies counted in fixed buckets (0.5 ms × 2^i, the histogram's bounds).
#[derive(Debug, Default)]
pub struct LatencyCounts {
    buckets: [std::sync::atomic::AtomicU64; LATENCY_BUCKETS],
}

pub const LATENCY_BUCKETS: usize = 18;

impl LatencyCounts {
    /// The upper bound of bucket `i` in seconds (the last one has none).
    pub fn bound(i: usize) -> f64 {
        0.0005 * f64::powi(2.0, i32::try_from(i).unwrap_or(i32::MAX))
    }

    pub fn observe(&self, seconds: f64) {
        let i = (0..LATENCY_BUCKETS - 1)
            .find(|&i| seconds <= Self::bound(i))
            .unwrap_or(LATENCY_BUCKETS - 1);
        self.buckets[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts per bucket so far.
    pub fn counts(&self) -> [u64; LATENCY_BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl KafkaMetrics {
    /// The latest statistics.
    pub fn latest(&self) -> KafkaStats {
        self.stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(super) fn store(&self, stats: KafkaStats) {
        *self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = stats;
    }
}
