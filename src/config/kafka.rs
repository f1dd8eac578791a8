//! The `[kafka]` section: the brokers, the producer's librdkafka properties (whose `Debug`
//! form redacts secrets), and metadata and delivery timing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::librdkafka;

/// The Kafka cluster and the producer's librdkafka properties.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// `host:port[,host:port...]` of the brokers to bootstrap from.
    pub bootstrap_servers: String,
    /// librdkafka producer properties, passed through verbatim (`linger.ms`, `acks`,
    /// `compression.type`, `security.protocol`, `sasl.*`, `ssl.*`, ...). They override
    /// floodgate's defaults. The queue limits that keep librdkafka below our buffer,
    /// `message.timeout.ms` (always infinite) and `bootstrap.servers` are reserved under every
    /// name librdkafka knows them by, and a property may be set under one name only
    /// (`linger.ms` or its alias `queue.buffering.max.ms`, not both). Values of properties
    /// holding secrets (`*password*`, `*secret*`, `sasl.oauthbearer.*`, `ssl.key*`) are never
    /// printed.
    pub producer: ProducerProperties,
    /// How often the cluster's topic list (existence, partition counts) is refreshed in the
    /// background, in milliseconds. `/readyz` follows the last refresh, so this is also how
    /// soon readiness notices Kafka going away or coming back. A topic not in the list is
    /// looked up again at most once a second.
    pub metadata_ttl_ms: u64,
    /// How long a metadata lookup may take before the request fails with 503, in milliseconds.
    pub metadata_timeout_ms: u64,
    /// How long a sync request waits for Kafka's acknowledgements before answering 503
    /// `kafka_unavailable`. Its records stay queued and are still delivered when Kafka returns
    /// (librdkafka never times a record out: see `kafka::settings`).
    pub delivery_timeout_ms: u64,
    /// Topics no tenant may write whatever its patterns (glob patterns), besides every topic
    /// whose name starts with `__` (Kafka's own) and `[cluster] registry_topic`, which are
    /// always refused. The default lists Schema Registry's and Kafka Connect's topics and
    /// Confluent's internal ones.
    pub internal_topics: Vec<String>,
}

/// `[kafka] internal_topics` by default.
pub fn default_internal_topics() -> Vec<String> {
    [
        "_schemas",
        "_confluent*",
        "connect-configs",
        "connect-offsets",
        "connect-status",
    ]
    .map(String::from)
    .to_vec()
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: "127.0.0.1:9092".into(),
            producer: ProducerProperties::default(),
            metadata_ttl_ms: 2_000,
            metadata_timeout_ms: 5_000,
            delivery_timeout_ms: 30_000,
            internal_topics: default_internal_topics(),
        }
    }
}

/// The `[kafka.producer]` table. Its `Debug` form redacts secrets, so a configuration can be
/// logged or shown in an error without leaking a password.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(transparent)]
pub struct ProducerProperties(pub BTreeMap<String, PropertyValue>);

impl std::ops::Deref for ProducerProperties {
    type Target = BTreeMap<String, PropertyValue>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for ProducerProperties {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl std::fmt::Debug for ProducerProperties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (name, value) in &self.0 {
            if librdkafka::is_sensitive(name) {
                map.entry(name, &"<redacted>");
            } else {
                map.entry(name, value);
            }
        }
        map.finish()
    }
}

/// A librdkafka property value: TOML strings, integers, floats and booleans are all accepted
/// and handed to librdkafka as their text.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum PropertyValue {
    Text(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

impl std::fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Text(s) => f.write_str(s),
            Self::Integer(i) => write!(f, "{i}"),
            Self::Float(x) => write!(f, "{x}"),
            Self::Bool(b) => write!(f, "{b}"),
        }
    }
}
