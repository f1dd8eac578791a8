//! Everything that speaks to Kafka: producer settings, sending and delivery reports, the topic
//! catalog (does a topic exist, how many partitions, is the cluster reachable), and what the
//! Kafka side reports about itself (statistics, delivery latency and errors).
//!
//! Layer: Kafka. Imports configuration, the buffer and the record type; it does not know what a
//! tenant is (failures are counted through [`FailureCounter`]) nor how a request looked.

mod catalog;
mod delivery;
mod producer;
mod settings;
mod stats;

pub use catalog::{Reachability, TopicCatalog, TopicInfo};
pub use delivery::{Batch, DeliveryFailure, FailureCounter, FailureKind, Outcome};
pub use producer::{KafkaProducer, ProducerError};
pub use settings::{client_config, connection_config};
pub use stats::{
    BrokerStats, ErrorLabels, KafkaMetrics, KafkaStats, LatencyCounts, LATENCY_BUCKETS,
};
