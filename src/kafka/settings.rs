//! The librdkafka configuration floodgate runs with: the one place that turns `[kafka]` into
//! client settings, for every client floodgate makes (the produce path's producer, the
//! compacted log's writer, reader and admin client, the lag guards' offset readers).
//!
//! The produce path's producer: three layers, later wins: safe defaults for a gateway
//! (acks=all, idempotence, short linger, lz4, 5 in-flight requests per connection, Java's
//! murmur2 partitioner for keyed records), then the
//! operator's `[kafka.producer]` table, then the queue limits that keep librdkafka's own queue
//! strictly larger than our buffer (so our buffer, which answers 429, is always the bound that
//! is hit first, and librdkafka never answers `QueueFull` mid-request). Every other client
//! starts from [`Connection`]: how to reach the cluster, none of the produce path's tuning.

use std::time::Duration;

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
    // A keyed record lands on the partition Kafka's Java producer (and so Confluent's REST
    // Proxy, Kafka Streams, every JVM client) picks for its key: murmur2 of the key, as
    // Utils.toPositive(murmur2(key)) % partitions. librdkafka's own default (consistent_random,
    // CRC32) sends the same key elsewhere, splitting a key's records between two partitions
    // when floodgate and a Java producer write one topic. Records without a key: random.
    ("partitioner", "murmur2_random"),
];

/// How to reach the cluster, for floodgate's other clients (the compacted log's and the offset
/// readers): the bootstrap servers and the operator's connection settings (`security.*`,
/// `sasl.*`, `ssl.*`, `client.*`), none of the produce path's tuning.
#[derive(Clone)]
pub struct Connection(ClientConfig);

impl std::fmt::Debug for Connection {
    /// The bootstrap servers only: the settings may hold a SASL password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("bootstrap_servers", &self.0.get("bootstrap.servers"))
            .finish_non_exhaustive()
    }
}

pub fn connection_config(kafka: &KafkaConfig) -> Connection {
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
    Connection(config)
}

/// The compacted log's producer: every change acknowledged by all in-sync replicas, without
/// duplicates, sent at once, and given up after `write_timeout`.
pub(super) fn log_writer(connection: &Connection, write_timeout: Duration) -> ClientConfig {
    let timeout_ms = write_timeout.as_millis().max(1).to_string();
    let mut config = connection.0.clone();
    config
        .set("acks", "all")
        .set("enable.idempotence", "true")
        // A change is one small record; waiting to batch it only delays the answer.
        .set("linger.ms", "0")
        // A write fails (the admin change is answered 503) instead of waiting for Kafka forever.
        .set("message.timeout.ms", &timeout_ms)
        // Back within a second of Kafka's return: these writes are rare, a quick reconnect
        // costs nothing.
        .set("reconnect.backoff.max.ms", LOG_RECONNECT_MAX_MS)
        .set("allow.auto.create.topics", "false");
    config
}

/// librdkafka's reconnect backoff doubles up to 10 s while a broker is down; the log's clients
/// keep it to a second, so a replica writes, and follows the others' changes, within about a
/// second of Kafka's return instead of up to 10 s later with a stale registry (one connection
/// per broker: a retry a second costs nothing).
const LOG_RECONNECT_MAX_MS: &str = "1000";

/// The compacted log's reader: by assignment from the first record, nothing committed (the
/// group id is only a name; the group is never joined).
pub(super) fn log_reader(connection: &Connection, group: &str) -> ClientConfig {
    let mut config = connection.0.clone();
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("allow.auto.create.topics", "false")
        .set("reconnect.backoff.max.ms", LOG_RECONNECT_MAX_MS)
        // librdkafka prefetches up to 64 MiB per partition by default; the log is read once
        // at start-up and then trickles.
        .set("queued.max.messages.kbytes", "4096");
    config
}

/// The admin client that creates the compacted log's topic.
pub(super) fn admin(connection: &Connection) -> ClientConfig {
    connection.0.clone()
}

/// A reader of `group`'s committed offsets that never joins the group nor commits.
pub(super) fn offsets_reader(connection: &Connection, group: &str) -> ClientConfig {
    let mut config = connection.0.clone();
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    config
}

/// The produce path's producer.
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
        assert_eq!(c.get("partitioner"), Some("murmur2_random"));
        kafka.producer.insert(
            "partitioner".into(),
            PropertyValue::Text("consistent".into()),
        );
        let c = client_config(&kafka, &BufferConfig::default());
        assert_eq!(c.get("partitioner"), Some("consistent"), "configurable");
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
