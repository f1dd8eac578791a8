//! The gateway's shared state, built once from configuration and handed to every handler,
//! grouped by who uses it: the produce path, the registry, the admin API, observability.
//!
//! Layer: assembly. Imports everything below the HTTP edges; imported by the edges.

mod parts;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::access::AdminTokens;
use crate::budget::Clock;
use crate::buffer::Buffer;
use crate::config::Config;
use crate::ingest::Ingest;
use crate::kafka::{KafkaMetrics, ProducerError};
use crate::metrics::Metrics;
use crate::registry::{RegistryError, RegistryStore};

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
    /// Where the quotas are counted (`[quotas]`, and whether replicas share the tenants).
    pub quotas: QuotaKeeping,
    /// Usage by tenant and hour (`[usage]`).
    pub usage: Arc<crate::usage::Ledger>,
    /// Set when shutdown starts: new requests get 503 with `Connection: close`.
    draining: AtomicBool,
}

/// Where the quotas' counts live: in this process, kept across restarts in `[quotas]
/// state_file` (written every `save_ms`); never shared, so refused where replicas would each
/// count them.
#[derive(Debug)]
pub struct QuotaKeeping {
    pub file: Option<Arc<crate::quota_file::QuotaFile>>,
    pub save_ms: u64,
    /// Replicas share the tenants without Redis (`config::ClusterConfig::counts_apart`): an
    /// admin change giving a tenant quotas is refused (`config::COUNTED_APART`).
    pub counts_apart: bool,
}

/// The admin API's credentials.
#[derive(Debug)]
pub struct AdminAccess {
    pub tokens: AdminTokens,
    /// The variable the tokens came from, to say so when there are none.
    pub token_env: String,
    /// Failed admin authentications per client address (apart from the produce listener's:
    /// bad API keys never lock an operator out).
    pub failures: Arc<crate::auth_failures::AuthFailures>,
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
    Redis(#[from] crate::cluster::UrlError),
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
    #[error("usage.topic: {0}")]
    UsageExport(String),
}

impl AppState {
    /// Builds the state; call inside the runtime (the topic catalog starts refreshing).
    pub fn build(
        config: &Config,
        clock: Arc<dyn Clock>,
        tokens: AdminTokens,
        options: BuildOptions,
    ) -> Result<Self, BuildError> {
        let BuildOptions {
            produce_port,
            clock: store_clock,
            registry_secrets,
            metrics_token,
            file,
        } = options;
        let registry = parts::open_registry(config, &clock, registry_secrets, file, produce_port)?;
        let buffer = Arc::new(Buffer::new(
            config.buffer.max_bytes,
            config.buffer.max_records,
        ));
        let kafka_metrics = KafkaMetrics::default();
        let (producer, catalog) = parts::start_kafka(config, buffer.clone(), &kafka_metrics)?;
        let (failures, admin_failures) = parts::auth_failures(config, &clock);
        let auth = Arc::new(crate::credential::Authenticator::new(
            &config.auth,
            clock.clone(),
        )?);
        let cluster = parts::cluster(config, store_clock, &registry, &clock, produce_port)?;
        let idempotency = Arc::new(parts::idempotency(config, &clock)?);
        let controls = parts::controls(
            config,
            &clock,
            &registry,
            buffer,
            cluster.as_ref(),
            &kafka_metrics,
        );
        let inflight_bodies = Arc::new(crate::inflight_bodies::InflightBodies::new(
            config.server.max_inflight_body_bytes,
        ));
        let metrics_token = parts::scrape_token(config, metrics_token)?;
        let mut schemas = crate::schema::Schemas::new(
            &config.schema_registry,
            &config.schemas,
            (config.limits.max_key_bytes, config.limits.max_value_bytes),
        )
        .map_err(BuildError::Schemas)?;
        // The tenants' schema allowances (registrations, lookups, unpaid work) count on the
        // gateway's clock, like its budgets (a test steps it).
        schemas.set_clock(clock.clone());
        let schemas = Arc::new(schemas);
        let ingest = Ingest {
            tenants: registry.tenants().clone(),
            auth,
            admission: controls.admission.clone(),
            catalog,
            producer,
            bounds: config.limits.clone(),
            max_body_bytes: config.server.max_body_bytes,
            max_inflation_ratio: config.server.max_inflation_ratio,
            codings: Arc::default(),
            body_read_timeout: Duration::from_millis(config.server.body_read_timeout_ms),
            inflight_bodies,
            failures,
            proxies: parts::proxies(config),
            unverified: crate::server::Unverified::new(
                config.server.max_unauthenticated_per_address,
                config.server.max_connections_per_tenant,
                parts::proxies(config),
            )
            .with_head_bytes(config.server.max_unauthenticated_bytes),
            delivery_timeout: Duration::from_millis(config.kafka.delivery_timeout_ms),
            cluster,
            streams: parts::stream_bounds(config),
            draining: tokio::sync::watch::channel(false).0,
            idempotency,
            schemas,
            internal: crate::identity::InternalTopics::new(
                &config.cluster.registry_topic,
                &parts::internal_topics(config),
            ),
        };
        let (status, metrics) = parts::observability(
            config,
            &ingest,
            &registry,
            &controls,
            kafka_metrics,
            admin_failures.clone(),
            &clock,
        );
        Ok(Self {
            usage: parts::usage_ledger(config, registry.tenants(), &clock, produce_port)?,
            metrics_token,
            status,
            adaptive: controls.adaptive,
            lag: controls.lag,
            metrics,
            ingest: Arc::new(ingest),
            registry,
            admin: AdminAccess {
                tokens,
                token_env: config.admin.token_env.clone(),
                failures: admin_failures,
            },
            ready_high_water: config.buffer.ready_high_water,
            compat: config.compat.clone(),
            quotas: parts::quota_keeping(config),
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
        // A bucket, so its answers carry the RateLimit fields (and a stranger's can be seen not to).
        records_per_sec: Some(1_000),
        ..Default::default()
    }];
    let tokens = AdminTokens::parse("ops:router-test-token").expect("tokens");
    let clock = Arc::new(crate::budget::ManualClock::new());
    Arc::new(AppState::build(&config, clock, tokens, BuildOptions::default()).expect("state"))
}
