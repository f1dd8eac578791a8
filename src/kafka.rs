//! Everything that speaks to Kafka: the client settings (every client floodgate makes is
//! configured in [`settings`]), sending and delivery reports, the topic catalog (does a topic
//! exist, how many partitions, is the cluster reachable), a compacted log of bytes (the shared
//! registry's topic), consumer-group offsets (for the lag guards), and what the Kafka side
//! reports about itself (statistics, delivery latency and errors).
//!
//! Layer: domain. Imports configuration, the buffer, the record type, topic names and the lag
//! guards' offset type; it does not know what a tenant is (failures are counted through
//! [`OutcomeCounter`]) nor how a request looked, nor what the log's records mean.

mod catalog;
mod delivery;
mod latency;
pub mod log;
mod offsets;
mod producer;
mod settings;
mod stats;

pub use catalog::{Reachability, TopicCatalog, TopicInfo};
pub use delivery::{Batch, DeliveryFailure, FailureKind, Outcome, OutcomeCounter};
pub use latency::{DeliveryLatency, LatencyWindow, RESOLUTION as LATENCY_RESOLUTION};
pub use log::{LogReader, LogRecord, LogTopic, OutRecord};
pub use offsets::KafkaOffsets;
pub use producer::{KafkaProducer, ProducerError};
pub use settings::{client_config, connection_config, Connection};
pub use stats::{
    BrokerStats, ErrorLabels, KafkaMetrics, KafkaStats, LatencyCounts, Spread, LATENCY_BUCKETS,
};

/// librdkafka's in-process mock cluster (`floodgate dev`, and tests that need a broker but
/// not a real one).
pub type MockCluster =
    rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>;
