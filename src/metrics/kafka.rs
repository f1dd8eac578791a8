//! Kafka's series: the delivery histogram and error counts the delivery path writes, and
//! librdkafka's statistics (its queue, and each broker's requests in flight, round trip and
//! throttle) as last reported.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType::Gauge as G;
use prometheus_client::registry::{Registry, Unit};

use super::{family, gauge};
use crate::kafka::{BrokerStats, KafkaMetrics, KafkaStats};

/// The families the delivery path writes to itself (registered once; cloned handles share
/// their series).
pub(super) fn register(registry: &mut Registry, kafka: &KafkaMetrics) {
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
}

/// librdkafka's statistics: queue and per-broker state.
pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    stats: &KafkaStats,
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        "kafka_queue_messages",
        "Messages in librdkafka's queue (librdkafka statistics)",
        None,
        G,
        &gauge(stats.queue_messages),
    )?;
    family(
        encoder,
        "kafka_queue",
        "Bytes in librdkafka's queue",
        Some(&Unit::Bytes),
        G,
        &gauge(stats.queue_bytes),
    )?;
    let per_broker = |value: fn(&BrokerStats) -> f64| -> Vec<_> {
        stats
            .brokers
            .iter()
            .map(|b| (vec![("broker", b.name.as_str())], ConstGauge::new(value(b))))
            .collect()
    };
    family(
        encoder,
        "kafka_broker_inflight_requests",
        "Requests sent to a broker and not answered",
        None,
        G,
        &per_broker(|b| b.inflight_requests as f64),
    )?;
    family(
        encoder,
        "kafka_broker_rtt",
        "Average broker round-trip time",
        Some(&Unit::Seconds),
        G,
        &per_broker(|b| b.rtt_us as f64 / 1e6),
    )?;
    family(
        encoder,
        "kafka_broker_throttle",
        "Average broker quota throttle time",
        Some(&Unit::Seconds),
        G,
        &per_broker(|b| b.throttle_ms as f64 / 1e3),
    )
}
