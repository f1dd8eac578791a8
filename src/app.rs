//! The gateway's shared state, built once from configuration and handed to every handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::admission::Admission;
use crate::budget::{Clock, GlobalBudget};
use crate::buffer::Buffer;
use crate::config::{Config, ConfigProblem, RequestLimits};
use crate::kafka::{client_config, KafkaProducer, ProducerError, TopicCatalog};
use crate::tenant::{Registry, Tenants};

#[derive(Debug)]
pub struct AppState {
    pub tenants: Tenants,
    pub admission: Admission,
    pub producer: Arc<KafkaProducer>,
    pub catalog: TopicCatalog,
    pub limits: RequestLimits,
    pub max_body_bytes: u64,
    pub body_read_timeout: Duration,
    /// Set when shutdown starts: new requests get 503 with `Connection: close`.
    draining: AtomicBool,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigProblem),
    #[error(transparent)]
    Producer(#[from] ProducerError),
}

impl AppState {
    pub fn build(config: &Config, clock: Arc<dyn Clock>) -> Result<Self, BuildError> {
        let buffer = Arc::new(Buffer::new(
            config.buffer.max_bytes,
            config.buffer.max_records,
        ));
        let producer = Arc::new(KafkaProducer::new(
            &client_config(&config.kafka, &config.buffer),
            buffer.clone(),
        )?);
        let catalog = TopicCatalog::new(
            producer.clone(),
            Duration::from_millis(config.kafka.metadata_ttl_ms),
            Duration::from_millis(config.kafka.metadata_timeout_ms),
        );
        Ok(Self {
            tenants: Tenants::new(Registry::from_configs(&config.tenants)?),
            admission: Admission::new(clock, GlobalBudget::new(config.global.spec()?), buffer),
            producer,
            catalog,
            limits: config.limits.clone(),
            max_body_bytes: config.server.max_body_bytes,
            body_read_timeout: Duration::from_millis(config.server.body_read_timeout_ms),
            draining: AtomicBool::new(false),
        })
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }
}
