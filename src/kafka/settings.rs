//! The librdkafka configuration floodgate runs with.
//!
//! Three layers, later wins: safe defaults for a gateway (acks=all, idempotence, short linger,
//! lz4, 5 in-flight requests per connection), then the operator's `[kafka.producer]` table,
//! then the queue limits that keep librdkafka's own queue strictly larger than our buffer
//! (so our buffer, which answers 429, is always the bound that is hit first, and librdkafka
//! never answers `QueueFull` mid-request).

use rdkafka::ClientConfig;

use crate::config::{librdkafka, BufferConfig, KafkaConfig};

/// Defaults that differ from librdkafka's, and why.
const DEFAULTS: &[(&str, &str)] = &[
    // Nothing acknowledged to a client may be lost: wait for all in-sync replicas.
    ("acks", "all"),
    // Retries without duplicates or reordering.
    ("enable.idempotence", "true"),
    // Batch for throughput without adding noticeable latency.
    ("linger.ms", "5"),
    ("compression.type", "lz4"),
    ("max.in.flight.requests.per.connection", "5"),
    // A metadata lookup must never create a topic: an unknown topic is a 404.
    ("allow.auto.create.topics", "false"),
    // Queue depth, in-flight requests, broker rtt and throttle for /metrics.
    ("statistics.interval.ms", "5000"),
];

/// How to reach the cluster, for floodgate's other clients (the registry's producer and
/// reader): the bootstrap servers and the operator's connection settings (`security.*`,
/// `sasl.*`, `ssl.*`, `client.*`), none of the produce path's tuning.
pub fn connection_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &kafka.bootstrap_servers);
    for (key, value) in kafka.producer.iter() {
        let canonical = librdkafka::canonical(key);
        if ["security.", "sasl.", "ssl.", "client."]
            .iter()
            .any(|p| canonical.starts_with(p))
        {
            config.set(canonical, value.to_string());
        }
    }
    config
}

pub fn client_config(kafka: &KafkaConfig, buffer: &BufferConfig) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in DEFAULTS {
        config.set(*key, *value);
    }
    // Every name is set under its canonical name, so an alias can neither race the name it
    // aliases (ClientConfig applies its map in no fixed order) nor slip past a reserved one.
    // Validation already refused both; this keeps the guarantee if it is ever bypassed.
    for (key, value) in kafka.producer.iter() {
        let canonical = librdkafka::canonical(key);
        if !librdkafka::RESERVED.iter().any(|(r, _)| *r == canonical) {
            config.set(canonical, value.to_string());
        }
    }
    config.set("bootstrap.servers", &kafka.bootstrap_servers);
    // Never time a record out: a record answered 202 is retried (idempotently, so without
    // duplicates) until Kafka takes it, however long an outage lasts. Its buffer space stays
    // held meanwhile, so an outage turns into 429 buffer_full, not into lost records. Sync
    // requests stop waiting after `[kafka] delivery_timeout_ms` instead (see the produce route).
    config.set("message.timeout.ms", "0");
    // Twice our buffer plus slack: librdkafka counts only key and value bytes, we also count
    // headers, so its queue cannot fill before ours does.
    let messages = buffer.max_records.saturating_mul(2).saturating_add(1024);
    let kbytes = (buffer.max_bytes / 1024)
        .saturating_mul(2)
        .saturating_add(1024);
    config.set(
        "queue.buffering.max.messages",
        messages.min(2_147_483_647).to_string(),
    );
    config.set(
        "queue.buffering.max.kbytes",
        kbytes.min(2_147_483_647).to_string(),
    );
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PropertyValue;

    #[test]
    fn defaults_are_safe_and_operator_values_win() {
        let mut kafka = KafkaConfig::default();
        kafka
            .producer
            .insert("linger.ms".into(), PropertyValue::Integer(50));
        let c = client_config(&kafka, &BufferConfig::default());
        assert_eq!(c.get("acks"), Some("all"));
        assert_eq!(c.get("enable.idempotence"), Some("true"));
        assert_eq!(c.get("linger.ms"), Some("50"));
    }

    #[test]
    fn librdkafka_queue_is_always_larger_than_our_buffer() {
        let mut kafka = KafkaConfig::default();
        kafka.producer.insert(
            "queue.buffering.max.messages".into(),
            PropertyValue::Integer(10),
        );
        let buffer = BufferConfig {
            max_bytes: 10 * 1024 * 1024,
            max_records: 5000,
            ..BufferConfig::default()
        };
        let c = client_config(&kafka, &buffer);
        assert_eq!(c.get("queue.buffering.max.messages"), Some("11024"));
        assert_eq!(c.get("queue.buffering.max.kbytes"), Some("21504"));
    }

    /// An alias of a reserved property can never replace floodgate's value, and an alias of an
    /// ordinary one lands under the canonical name (so it cannot race it).
    #[test]
    fn aliases_resolve_to_one_name_and_reserved_ones_stay_ours() {
        for (alias, canonical) in [
            ("delivery.timeout.ms", "message.timeout.ms"),
            ("metadata.broker.list", "bootstrap.servers"),
        ] {
            let mut kafka = KafkaConfig::default();
            kafka
                .producer
                .insert(alias.into(), PropertyValue::Text("120000".into()));
            let c = client_config(&kafka, &BufferConfig::default());
            assert_eq!(c.get(alias), None, "{alias} is never passed on");
            assert_ne!(c.get(canonical), Some("120000"), "{canonical}");
        }
        let mut kafka = KafkaConfig::default();
        kafka
            .producer
            .insert("request.required.acks".into(), PropertyValue::Integer(1));
        kafka
            .producer
            .insert("queue.buffering.max.ms".into(), PropertyValue::Integer(20));
        let c = client_config(&kafka, &BufferConfig::default());
        assert_eq!(
            (c.get("acks"), c.get("request.required.acks")),
            (Some("1"), None)
        );
        assert_eq!(c.get("linger.ms"), Some("20"));
    }
}
