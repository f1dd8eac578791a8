//! The gateway's shared state, built once from configuration and handed to every handler,
//! grouped by who uses it: the produce path, the registry, the admin API, observability.
//!
//! Layer: assembly. Imports everything below the HTTP edges; imported by the edges.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::access::AdminTokens;
use crate::admission::Admission;
use crate::budget::Clock;
use crate::buffer::Buffer;
use crate::cluster::{Cluster, RedisStore, Settings};
use crate::config::Config;
use crate::ingest::Ingest;
use crate::kafka::{client_config, KafkaMetrics, KafkaProducer, ProducerError, TopicCatalog};
use crate::metrics::Metrics;
use crate::registry::{
    InMemory, Persistence, RegistryError, RegistryLog, RegistryStore, StateFile,
};

#[derive(Debug)]
pub struct AppState {
    /// The produce path: tenants, admission, Kafka, request bounds (shared with open streams).
    pub ingest: Arc<Ingest>,
    /// The registry's source of truth; every admin change and reload goes through it.
    pub registry: Arc<RegistryStore>,
    /// Who may call the admin API.
    pub admin: AdminAccess,
    /// Prometheus metrics (read from live state at scrape time).
    pub metrics: Metrics,
    /// The token `/metrics` requires (`[metrics] token_env`), if any.
    pub metrics_token: Option<String>,
    /// Buffer occupancy above which `/readyz` says not ready.
    pub ready_high_water: f64,
    /// The status page's history and snapshot (sampled every second).
    pub status: Arc<crate::status::StatusBoard>,
    /// Adaptive broker protection (its settings can be changed live, so it always exists).
    pub adaptive: Arc<crate::adaptive_agent::AdaptiveAgent>,
    /// Lag guards (changed live through the admin API, so the agent always exists).
    pub lag: Arc<crate::lag_agent::LagAgent>,
    /// Confluent REST Proxy compatibility settings (the v2 and v3 routes).
    pub compat: crate::config::CompatConfig,
    /// Set when shutdown starts: new requests get 503 with `Connection: close`.
    draining: AtomicBool,
}

/// The admin API's credentials.
#[derive(Debug)]
pub struct AdminAccess {
    pub tokens: AdminTokens,
    /// The variable the tokens came from, to say so when there are none.
    pub token_env: String,
    /// Failed admin authentications per client address (apart from the produce listener's:
    /// bad API keys never lock an operator out).
    pub failures: Arc<crate::failure_guard::FailureGuard>,
}

/// What the state needs besides the configuration (what the environment would otherwise give).
#[derive(Debug, Default)]
pub struct BuildOptions {
    /// The produce listener's port (part of the default replica id).
    pub produce_port: u16,
    /// The clock the shared buckets count on; `None`: Redis's own.
    pub clock: Option<Arc<dyn Clock>>,
    /// The shared registry's secrets; `None`: read from `[cluster] registry_secret_env`.
    pub registry_secrets: Option<crate::registry::RegistrySecrets>,
    /// The `/metrics` scrape token; `None`: read from `[metrics] token_env` (if set).
    pub metrics_token: Option<String>,
    /// The configuration file's part, its tenants moved out of the config (at 100,000 tenants
    /// a copy is 45 MB at start-up); `None`: copied from the config.
    pub file: Option<crate::registry::FilePart>,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Producer(#[from] ProducerError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("admin tokens: {0}")]
    AdminTokens(String),
    #[error("cluster.redis_url: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("cluster.registry_secret_env: {0}")]
    RegistrySecret(String),
    #[error(transparent)]
    Join(#[from] crate::cluster::JoinError),
    #[error("metrics.token_env: {0}")]
    MetricsToken(String),
    #[error(transparent)]
    Auth(#[from] crate::credential::AuthBuildError),
    #[error("schema_registry: {0}")]
    Schemas(String),
}

impl AppState {
    /// Builds the state; call inside the runtime (the topic catalog starts refreshing).
    pub fn build(
        config: &Config,
        clock: Arc<dyn Clock>,
        tokens: AdminTokens,
        options: BuildOptions,
    ) -> Result<Self, BuildError> {
        let persistence: Box<dyn Persistence> = match &config.admin.state_file {
            Some(path) => Box::new(StateFile::open(path)?),
            None => Box::new(InMemory),
        };
        // The file's tenants, moved out by the caller (`run`) or copied from `config`.
        let file = options
            .file
            .unwrap_or_else(|| crate::registry::FilePart::of(config));
        let replica_id =
            crate::cluster::Settings::from_config(&config.cluster, options.produce_port).replica_id;
        let registry = Arc::new(if config.cluster.shared_registry {
            let secrets = match options.registry_secrets {
                Some(secrets) => secrets,
                None => {
                    crate::registry::registry_secrets(config).map_err(BuildError::RegistrySecret)?
                }
            };
            let log = RegistryLog::new(
                crate::kafka::connection_config(&config.kafka),
                &config.cluster.registry_topic,
                Duration::from_millis(config.cluster.registry_write_timeout_ms),
                config.cluster.registry_replication,
                secrets,
            )
            .map_err(|e| RegistryError::Shared(e.to_string()))?;
            RegistryStore::shared(Some(file), log, &replica_id, clock.clone())
        } else {
            RegistryStore::open(file, persistence, clock.clone())?
        });
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
        catalog.start_refreshing();
        let guard = || {
            Arc::new(crate::failure_guard::FailureGuard::new(
                config.server.auth_failures_per_sec,
                config.server.auth_failures_burst,
                clock.clone(),
            ))
        };
        let (failures, admin_failures) = (guard(), guard());
        let proxies = crate::forwarded::TrustedProxies::parse(
            &config.server.trusted_proxies,
            config.server.forwarded_header,
        )
        .unwrap_or_default();
        let tenants = registry.tenants().clone();
        let auth = Arc::new(crate::credential::Authenticator::new(
            &config.auth,
            clock.clone(),
        )?);
        let cluster = match &config.cluster.redis_url {
            Some(url) => {
                let store = RedisStore::new(
                    url,
                    &config.cluster.key_prefix,
                    Duration::from_millis(config.cluster.connect_timeout_ms),
                    Duration::from_millis(config.cluster.command_timeout_ms),
                    options.clock,
                )?;
                Some(Arc::new(Cluster::new(
                    store,
                    tenants.clone(),
                    registry.global().clone(),
                    clock.clone(),
                    Settings::from_config(&config.cluster, options.produce_port),
                )))
            }
            None => None,
        };
        // Keys live where a retry can find them: in Redis when replicas share budgets there
        // (a retry may land on any replica), in this process's memory otherwise.
        let idempotency = Arc::new(match &config.cluster.redis_url {
            Some(url) => crate::idempotency::Idempotency::in_redis(
                &config.idempotency,
                url,
                &config.cluster.key_prefix,
                Duration::from_millis(config.cluster.connect_timeout_ms),
            )?,
            None => crate::idempotency::Idempotency::in_memory(&config.idempotency, clock.clone()),
        });
        let plan = Arc::new(crate::adaptive::PlanCell::default());
        let lag_plan = Arc::new(crate::lag::LagPlanCell::default());
        let mut admission = Admission::new(clock.clone(), registry.global().clone(), buffer)
            .adaptive(plan.clone())
            .lag_guarded(lag_plan.clone());
        if let Some(cluster) = &cluster {
            admission = admission.clustered(cluster.sharing.clone());
        }
        let admission = Arc::new(admission);
        let body_budget = Arc::new(crate::body_budget::BodyBudget::new(
            config.server.max_inflight_body_bytes,
        ));
        let adaptive = Arc::new(crate::adaptive_agent::AdaptiveAgent::new(
            config.adaptive.clone(),
            plan,
            tenants.clone(),
            admission.clone(),
            kafka_metrics.clone(),
            clock.clone(),
        ));
        let members = match &cluster {
            Some(c) => {
                let c = c.clone();
                crate::lag_agent::Members(Arc::new(move || {
                    c.stats.members.load(std::sync::atomic::Ordering::Relaxed)
                }))
            }
            None => crate::lag_agent::Members::one(),
        };
        let lag = Arc::new(crate::lag_agent::LagAgent::new(
            config.lag_guards.clone(),
            lag_plan,
            tenants.clone(),
            members,
            Arc::new(crate::lag_agent::KafkaOffsets::new(
                crate::kafka::connection_config(&config.kafka),
            )),
            clock.clone(),
        ));
        let status = Arc::new(crate::status::StatusBoard::new(
            tenants.clone(),
            admission.clone(),
            kafka_metrics.clone(),
            cluster.clone(),
            clock.clone(),
            config.buffer.ready_high_water,
        ));
        let metrics_token = match (&config.metrics.token_env, options.metrics_token) {
            (_, Some(token)) => Some(token),
            (None, None) => None,
            (Some(name), None) => {
                Some(crate::access::scrape_token_from_env(name).map_err(BuildError::MetricsToken)?)
            }
        };
        let schemas = Arc::new(
            crate::schema::Schemas::new(
                &config.schema_registry,
                &config.schemas,
                (config.limits.max_key_bytes, config.limits.max_value_bytes),
            )
            .map_err(BuildError::Schemas)?,
        );
        Ok(Self {
            metrics_token,
            status: status.clone(),
            adaptive: adaptive.clone(),
            lag: lag.clone(),
            metrics: Metrics::new(
                tenants.clone(),
                admission.clone(),
                kafka_metrics,
                [failures.clone(), admin_failures.clone()],
                body_budget.clone(),
                cluster.clone(),
                crate::metrics::Agents {
                    adaptive,
                    lag,
                    registry: registry.clone(),
                    idempotency: idempotency.clone(),
                    tenant_series: crate::metrics::tenants::TenantSeries::new(
                        tenants.clone(),
                        admission.clone(),
                        status.clone(),
                        &config.metrics,
                    ),
                },
            )
            .with_collector(Box::new(crate::metrics::auth::AuthCollector(auth.clone())))
            .with_collector(Box::new(crate::metrics::schemas::SchemaCollector(
                schemas.clone(),
            ))),
            ingest: Arc::new(Ingest {
                tenants,
                auth,
                admission,
                catalog,
                producer,
                bounds: config.limits.clone(),
                max_body_bytes: config.server.max_body_bytes,
                body_read_timeout: Duration::from_millis(config.server.body_read_timeout_ms),
                body_budget: body_budget.clone(),
                failures,
                proxies,
                delivery_timeout: Duration::from_millis(config.kafka.delivery_timeout_ms),
                cluster,
                streams: crate::ingest::stream::StreamBounds {
                    max_unsettled: config.compat.stream_max_unsettled,
                    idle: Duration::from_millis(config.compat.stream_idle_timeout_ms),
                    max_duration: Duration::from_millis(config.compat.stream_max_duration_ms),
                },
                draining: tokio::sync::watch::channel(false).0,
                idempotency,
                schemas,
                internal: crate::identity::InternalTopics::new(
                    &config.cluster.registry_topic,
                    &config.kafka.internal_topics,
                ),
            }),
            registry,
            admin: AdminAccess {
                tokens,
                token_env: config.admin.token_env.clone(),
                failures: admin_failures,
            },
            ready_high_water: config.buffer.ready_high_water,
            compat: config.compat.clone(),
            draining: AtomicBool::new(false),
        })
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
        self.ingest.draining.send_replace(true);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }
}

/// State for router tests that need no sockets: a tenant "acme" (key `acme-key`) on `test.*`,
/// admin token `ops:router-test-token`, and a Kafka client that is never reached.
#[cfg(test)]
pub(crate) fn state_for_tests() -> Arc<AppState> {
    use crate::identity::ApiKeyHash;
    let mut config = Config::from_toml_with_env("", Vec::new()).expect("defaults");
    config.kafka.bootstrap_servers = "127.0.0.1:1".into();
    config.tenants = vec![crate::config::TenantConfig {
        id: "acme".into(),
        api_key_sha256: vec![ApiKeyHash::of_key("acme-key").to_hex()],
        topics: vec!["test.*".into()],
        ..Default::default()
    }];
    let tokens = AdminTokens::parse("ops:router-test-token").expect("tokens");
    let clock = Arc::new(crate::budget::ManualClock::new());
    Arc::new(AppState::build(&config, clock, tokens, BuildOptions::default()).expect("state"))
}
