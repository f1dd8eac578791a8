//! The gateway's shared state, built once from configuration and handed to every handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::admin::auth::AdminTokens;
use crate::admin::store::{StoreError, StoreState, TenantStore};
use crate::admission::Admission;
use crate::budget::{Clock, GlobalBudget};
use crate::buffer::Buffer;
use crate::config::{Config, ConfigProblem, RequestLimits};
use crate::kafka::{client_config, KafkaProducer, ProducerError, TopicCatalog};
use crate::metrics::{KafkaMetrics, Metrics};
use crate::tenant::{Registry, Tenants};

#[derive(Debug)]
pub struct AppState {
    pub tenants: Arc<Tenants>,
    pub admission: Arc<Admission>,
    pub metrics: Metrics,
    /// Buffer occupancy above which `/readyz` says not ready.
    pub ready_high_water: f64,
    pub producer: Arc<KafkaProducer>,
    pub catalog: TopicCatalog,
    /// The registry's declarative form; every admin change goes through it.
    pub store: TenantStore,
    pub admin_tokens: AdminTokens,
    /// The variable the tokens came from, to say so when there are none.
    pub admin_token_env: String,
    pub limits: RequestLimits,
    pub max_body_bytes: u64,
    pub body_read_timeout: Duration,
    /// How long a sync request waits for Kafka's acknowledgements.
    pub delivery_timeout: Duration,
    /// Set when shutdown starts: new requests get 503 with `Connection: close`.
    draining: AtomicBool,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigProblem),
    #[error(transparent)]
    Producer(#[from] ProducerError),
    #[error(transparent)]
    State(#[from] StoreError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

impl AppState {
    pub fn build(config: &Config, clock: Arc<dyn Clock>) -> Result<Self, BuildError> {
        // The state file, when there is one, is the registry: config-file tenants plus every
        // admin change since. Without one, the config file's tenants are the start.
        let state = match &config.admin.state_file {
            Some(path) => match StoreState::load(path)? {
                Some(state) => {
                    tracing::info!(file = %path.display(), tenants = state.tenants.len(),
                        "tenant registry loaded from the state file");
                    state
                }
                None => StoreState::from_config(config),
            },
            None => StoreState::from_config(config),
        };
        let tenant_configs: Vec<_> = state.tenants.values().cloned().collect();
        let registry = Registry::from_configs(&tenant_configs)?;
        let global = state.global.spec()?;
        let buffer = Arc::new(Buffer::new(
            config.buffer.max_bytes,
            config.buffer.max_records,
        ));
        let kafka_metrics = KafkaMetrics::default();
        let producer = KafkaProducer::new(
            &client_config(&config.kafka, &config.buffer),
            buffer.clone(),
            kafka_metrics.clone(),
        )?;
        let catalog = TopicCatalog::new(
            producer.clone(),
            Duration::from_millis(config.kafka.metadata_ttl_ms),
            Duration::from_millis(config.kafka.metadata_timeout_ms),
        );
        let tenants = Arc::new(Tenants::new(registry));
        let admission = Arc::new(Admission::new(clock, GlobalBudget::new(global), buffer));
        Ok(Self {
            metrics: Metrics::new(tenants.clone(), admission.clone(), kafka_metrics),
            ready_high_water: config.buffer.ready_high_water,
            tenants,
            admission,
            store: TenantStore::new(state, config.admin.state_file.clone()),
            admin_tokens: AdminTokens::from_env(&config.admin.token_env),
            admin_token_env: config.admin.token_env.clone(),
            producer,
            catalog,
            limits: config.limits.clone(),
            max_body_bytes: config.server.max_body_bytes,
            body_read_timeout: Duration::from_millis(config.server.body_read_timeout_ms),
            delivery_timeout: Duration::from_millis(config.kafka.delivery_timeout_ms),
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
