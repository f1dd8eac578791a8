//! Everything that speaks to Kafka: producer settings, sending and delivery reports, and the
//! topic catalog (does a topic exist, how many partitions).

mod catalog;
mod delivery;
mod producer;
mod settings;

pub use catalog::{TopicCatalog, TopicInfo};
pub use delivery::{Batch, DeliveryFailure, FailureKind, Outcome};
pub use producer::{KafkaProducer, ProducerError};
pub use settings::client_config;
