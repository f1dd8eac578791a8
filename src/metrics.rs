//! Prometheus metrics, served at `GET /metrics` on the admin listener.
//!
//! The request path only touches atomics it already owns (tenant counters, the buffer's word,
//! bucket TATs); everything per tenant is read at scrape time by [`LiveCollector`], so no label
//! lookup or allocation happens per request. Histograms (HTTP and delivery latency) are the
//! exception, with small fixed label sets. Label values come from the registry (tenant ids) or
//! from closed sets (reasons, outcomes, routes, status codes, librdkafka error names, brokers),
//! never from request data.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::admission::{Admission, Reason};
use crate::tenant::Tenants;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub route: &'static str,
    pub status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub code: String,
}

/// The last librdkafka statistics we received (every `statistics.interval.ms`).
#[derive(Debug, Clone, Default)]
pub struct KafkaStats {
    pub queue_messages: u64,
    pub queue_bytes: u64,
    /// Per broker: (name, in-flight requests, average rtt in µs, average throttle in ms).
    pub brokers: Vec<(String, i64, i64, i64)>,
}

/// Metrics written by the Kafka delivery path.
#[derive(Debug, Clone)]
pub struct KafkaMetrics {
    pub delivery_seconds: Histogram,
    pub delivery_errors: Family<ErrorLabels, Counter>,
    pub stats: Arc<Mutex<KafkaStats>>,
}

impl Default for KafkaMetrics {
    fn default() -> Self {
        Self {
            // 0.5 ms to ~32 s.
            delivery_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 17)),
            delivery_errors: Family::default(),
            stats: Arc::default(),
        }
    }
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub http_seconds: Family<HttpLabels, Histogram>,
    pub kafka: KafkaMetrics,
}

impl Metrics {
    pub fn new(tenants: Arc<Tenants>, admission: Arc<Admission>, kafka: KafkaMetrics) -> Self {
        let mut registry = Registry::with_prefix("floodgate");
        let http_seconds = Family::<HttpLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 18))
        });
        registry.register_with_unit(
            "http_request_duration",
            "HTTP request latency by route and status",
            Unit::Seconds,
            http_seconds.clone(),
        );
        registry.register_with_unit(
            "kafka_delivery_duration",
            "Time from enqueue to Kafka's answer for a request's last record, per request",
            Unit::Seconds,
            kafka.delivery_seconds.clone(),
        );
        registry.register(
            "kafka_delivery_errors",
            "Records Kafka did not acknowledge, by librdkafka error",
            kafka.delivery_errors.clone(),
        );
        registry.register_collector(Box::new(LiveCollector {
            tenants,
            admission,
            kafka_stats: kafka.stats.clone(),
        }));
        Self {
            registry,
            http_seconds,
            kafka,
        }
    }

    /// The exposition text (OpenMetrics, which Prometheus scrapes natively).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "metrics encoding failed");
        }
        out
    }
}

/// Reads live state at scrape time.
#[derive(Debug)]
struct LiveCollector {
    tenants: Arc<Tenants>,
    admission: Arc<Admission>,
    kafka_stats: Arc<Mutex<KafkaStats>>,
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric_type: prometheus_client::metrics::MetricType,
    series: &[(Labels<'_>, M)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, unit, metric_type)?;
    for (labels, value) in series {
        value.encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

impl prometheus_client::collector::Collector for LiveCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType::{Counter as C, Gauge as G};
        let registry = self.tenants.load();
        let (mut requests, mut records, mut bytes, mut rejected) = (vec![], vec![], vec![], vec![]);
        let (mut tokens, mut held) = (vec![], vec![]);
        for t in registry.tenants() {
            let id = t.id.as_str();
            let s = &t.stats;
            let rejected_total: u64 = Reason::ALL.iter().map(|r| s.rejected_count(*r)).sum();
            requests.push((
                vec![("tenant", id), ("outcome", "admitted")],
                ConstCounter::new(s.admitted_requests.load(Relaxed)),
            ));
            requests.push((
                vec![("tenant", id), ("outcome", "rejected")],
                ConstCounter::new(rejected_total),
            ));
            records.push((
                vec![("tenant", id), ("outcome", "admitted")],
                ConstCounter::new(s.admitted_records.load(Relaxed)),
            ));
            records.push((
                vec![("tenant", id), ("outcome", "failed")],
                ConstCounter::new(s.failed_records.load(Relaxed)),
            ));
            bytes.push((
                vec![("tenant", id), ("outcome", "admitted")],
                ConstCounter::new(s.admitted_bytes.load(Relaxed)),
            ));
            for r in Reason::ALL {
                rejected.push((
                    vec![("tenant", id), ("reason", r.as_str())],
                    ConstCounter::new(s.rejected_count(r)),
                ));
            }
            let view = self.admission.view(t);
            if let Some(v) = view.tenant_records {
                tokens.push((
                    vec![("tenant", id), ("bucket", "records")],
                    ConstGauge::new(v.available as f64),
                ));
            }
            if let Some(v) = view.tenant_bytes {
                tokens.push((
                    vec![("tenant", id), ("bucket", "bytes")],
                    ConstGauge::new(v.available as f64),
                ));
            }
            held.push((
                vec![("tenant", id)],
                ConstGauge::new(t.usage.bytes.load(Relaxed) as f64),
            ));
        }
        family(
            &mut encoder,
            "tenant_requests",
            "Produce requests by tenant and outcome",
            None,
            C,
            &requests,
        )?;
        family(
            &mut encoder,
            "tenant_records",
            "Records by tenant and outcome (failed: not acknowledged by Kafka)",
            None,
            C,
            &records,
        )?;
        family(
            &mut encoder,
            "tenant_record",
            "Record bytes (key + value + headers) admitted, by tenant",
            Some(&Unit::Bytes),
            C,
            &bytes,
        )?;
        family(
            &mut encoder,
            "tenant_rejections",
            "Requests refused with 429, by tenant and reason",
            None,
            C,
            &rejected,
        )?;
        family(
            &mut encoder,
            "tenant_tokens",
            "Tokens available now in each tenant bucket",
            None,
            G,
            &tokens,
        )?;
        family(
            &mut encoder,
            "tenant_buffer",
            "Record bytes each tenant holds in the buffer",
            Some(&Unit::Bytes),
            G,
            &held,
        )?;

        let buffer = &self.admission.buffer;
        let (b, r) = buffer.held();
        let gauge = |v: u64| vec![(Vec::new(), ConstGauge::new(v as f64))];
        family(
            &mut encoder,
            "buffer_held",
            "Record bytes handed to Kafka and not yet acknowledged",
            Some(&Unit::Bytes),
            G,
            &gauge(b),
        )?;
        family(
            &mut encoder,
            "buffer_held_records",
            "Records handed to Kafka and not yet acknowledged",
            None,
            G,
            &gauge(r),
        )?;
        family(
            &mut encoder,
            "buffer_capacity",
            "Buffer bound in bytes",
            Some(&Unit::Bytes),
            G,
            &gauge(buffer.max_bytes()),
        )?;
        family(
            &mut encoder,
            "buffer_capacity_records",
            "Buffer bound in records",
            None,
            G,
            &gauge(buffer.max_records()),
        )?;
        let (gr, gb) = self.admission.global.view(self.admission.now_ns());
        let mut global = vec![];
        if let Some(v) = gr {
            global.push((
                vec![("bucket", "records")],
                ConstGauge::new(v.available as f64),
            ));
        }
        if let Some(v) = gb {
            global.push((
                vec![("bucket", "bytes")],
                ConstGauge::new(v.available as f64),
            ));
        }
        family(
            &mut encoder,
            "global_tokens",
            "Tokens available now in the global buckets",
            None,
            G,
            &global,
        )?;

        let stats = self
            .kafka_stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        family(
            &mut encoder,
            "kafka_queue_messages",
            "Messages in librdkafka's queue (librdkafka statistics)",
            None,
            G,
            &gauge(stats.queue_messages),
        )?;
        family(
            &mut encoder,
            "kafka_queue",
            "Bytes in librdkafka's queue",
            Some(&Unit::Bytes),
            G,
            &gauge(stats.queue_bytes),
        )?;
        let (mut inflight, mut rtt, mut throttle) = (vec![], vec![], vec![]);
        for (name, reqs, rtt_us, throttle_ms) in &stats.brokers {
            inflight.push((
                vec![("broker", name.as_str())],
                ConstGauge::new(*reqs as f64),
            ));
            rtt.push((
                vec![("broker", name.as_str())],
                ConstGauge::new(*rtt_us as f64 / 1e6),
            ));
            throttle.push((
                vec![("broker", name.as_str())],
                ConstGauge::new(*throttle_ms as f64 / 1e3),
            ));
        }
        family(
            &mut encoder,
            "kafka_broker_inflight_requests",
            "Requests sent to a broker and not answered",
            None,
            G,
            &inflight,
        )?;
        family(
            &mut encoder,
            "kafka_broker_rtt",
            "Average broker round-trip time",
            Some(&Unit::Seconds),
            G,
            &rtt,
        )?;
        family(
            &mut encoder,
            "kafka_broker_throttle",
            "Average broker quota throttle time",
            Some(&Unit::Seconds),
            G,
            &throttle,
        )?;
        Ok(())
    }
}
