//! The parts [`super::AppState::build`] puts together, each built from the configuration:
//! the registry, the producer and catalog, cluster mode, admission and its agents, the
//! idempotency keys, the status board and metrics.

use std::sync::Arc;
use std::time::Duration;

use super::BuildError;
use crate::admission::Admission;
use crate::auth_failures::AuthFailures;
use crate::budget::Clock;
use crate::buffer::Buffer;
use crate::cluster::{Cluster, RedisIdempotencyStore, RedisStore, Settings};
use crate::config::Config;
use crate::idempotency::Idempotency;
use crate::ingest::Ingest;
use crate::kafka::{client_config, KafkaMetrics, KafkaProducer, TopicCatalog};
use crate::metrics::Metrics;
use crate::registry::{
    InMemory, Persistence, RegistryError, RegistryLog, RegistryStore, StateFile,
};

/// Failed authentications per client address: the produce listener's and the admin API's,
/// apart (bad API keys never lock an operator out).
pub(super) fn auth_failures(
    config: &Config,
    clock: &Arc<dyn Clock>,
) -> (Arc<AuthFailures>, Arc<AuthFailures>) {
    let guard = || {
        Arc::new(AuthFailures::new(
            config.server.auth_failures_per_sec,
            config.server.auth_failures_burst,
            clock.clone(),
        ))
    };
    (guard(), guard())
}

/// The proxies whose forwarding headers say who the client is (validated with the config).
pub(super) fn proxies(config: &Config) -> crate::forwarded::TrustedProxies {
    crate::forwarded::TrustedProxies::parse(
        &config.server.trusted_proxies,
        config.server.forwarded_header,
    )
    .unwrap_or_default()
}

/// The bounds of a stream of records (Confluent v3 streaming produce).
pub(super) fn stream_bounds(config: &Config) -> crate::ingest::stream::StreamBounds {
    crate::ingest::stream::StreamBounds {
        max_unsettled: config.compat.stream_max_unsettled,
        idle: Duration::from_millis(config.compat.stream_idle_timeout_ms),
        max_duration: Duration::from_millis(config.compat.stream_max_duration_ms),
    }
}

/// The registry's source of truth: the registry topic (shared registry), or the state file
/// (or memory) of this replica alone. `file`: the configuration file's tenants, moved out by
/// the caller (`run`) or copied from `config`.
pub(super) fn open_registry(
    config: &Config,
    clock: &Arc<dyn Clock>,
    secrets: Option<crate::registry::RegistrySecrets>,
    file: Option<crate::registry::FilePart>,
    produce_port: u16,
) -> Result<Arc<RegistryStore>, BuildError> {
    // Opened whatever the mode: a state file that cannot be opened fails the start even with
    // the shared registry.
    let persistence: Box<dyn Persistence> = match &config.admin.state_file {
        Some(path) => Box::new(StateFile::open(path)?),
        None => Box::new(InMemory),
    };
    let file = file.unwrap_or_else(|| crate::registry::FilePart::of(config));
    if !config.cluster.shared_registry {
        let store = RegistryStore::open(file, persistence, clock.clone())?;
        return Ok(Arc::new(store));
    }
    let secrets = match secrets {
        Some(secrets) => secrets,
        None => crate::registry::registry_secrets(config).map_err(BuildError::RegistrySecret)?,
    };
    let log = RegistryLog::new(
        crate::kafka::connection_config(&config.kafka),
        &config.cluster.registry_topic,
        Duration::from_millis(config.cluster.registry_write_timeout_ms),
        config.cluster.registry_replication,
        secrets,
    )
    .map_err(|e| RegistryError::Shared(e.to_string()))?;
    let replica_id = Settings::from_config(&config.cluster, produce_port).replica_id;
    Ok(Arc::new(RegistryStore::shared(
        Some(file),
        log,
        &replica_id,
        clock.clone(),
    )))
}

/// The shared producer, and the topic catalog on it (refreshing from now on).
pub(super) fn start_kafka(
    config: &Config,
    buffer: Arc<Buffer>,
    metrics: &KafkaMetrics,
) -> Result<(Arc<KafkaProducer>, Arc<TopicCatalog>), BuildError> {
    let producer = KafkaProducer::new(
        &client_config(&config.kafka, &config.buffer),
        buffer,
        metrics.clone(),
    )?;
    let catalog = TopicCatalog::new(
        producer.clone(),
        Duration::from_millis(config.kafka.metadata_ttl_ms),
        Duration::from_millis(config.kafka.metadata_timeout_ms),
    );
    catalog.start_refreshing();
    Ok((producer, catalog))
}

/// Cluster mode (`[cluster] redis_url`): budgets shared through Redis, counted on
/// `store_clock` (`None`: Redis's own).
pub(super) fn cluster(
    config: &Config,
    store_clock: Option<Arc<dyn Clock>>,
    registry: &RegistryStore,
    clock: &Arc<dyn Clock>,
    produce_port: u16,
) -> Result<Option<Arc<Cluster>>, BuildError> {
    let Some(url) = &config.cluster.redis_url else {
        return Ok(None);
    };
    let store = RedisStore::new(
        url,
        &config.cluster.key_prefix,
        Duration::from_millis(config.cluster.connect_timeout_ms),
        Duration::from_millis(config.cluster.command_timeout_ms),
        store_clock,
    )?;
    Ok(Some(Arc::new(
        Cluster::new(
            Box::new(store),
            registry.tenants().clone(),
            registry.global().clone(),
            clock.clone(),
            Settings::from_config(&config.cluster, produce_port),
        )
        // Validated with the configuration: a bad offset never gets here.
        .with_calendar(config.quotas.calendar().unwrap_or_default()),
    )))
}

/// What decides admission: the admission itself and the two agents that feed it plans.
pub(super) struct Controls {
    pub admission: Arc<Admission>,
    pub adaptive: Arc<crate::adaptive_agent::AdaptiveAgent>,
    pub lag: Arc<crate::lag_agent::LagAgent>,
}

/// Admission on the registry's global budget and `buffer`, following the adaptive and lag
/// plans (and leased slices in cluster mode), and the agents that publish those plans.
pub(super) fn controls(
    config: &Config,
    clock: &Arc<dyn Clock>,
    registry: &RegistryStore,
    buffer: Arc<Buffer>,
    cluster: Option<&Arc<Cluster>>,
    kafka_metrics: &KafkaMetrics,
) -> Controls {
    let plan = Arc::new(crate::adaptive::PlanCell::default());
    let lag_plan = Arc::new(crate::lag::LagPlanCell::default());
    let w = &config.wait;
    let mut admission = Admission::new(clock.clone(), registry.global().clone(), buffer)
        .adaptive(plan.clone())
        .lag_guarded(lag_plan.clone())
        .with_waits(crate::hold::WaitRoom::new(
            std::time::Duration::from_millis(w.max_ms),
            w.max_requests,
            w.max_requests_per_tenant,
        ))
        // Validated with the configuration: a bad offset never gets here.
        .with_calendar(config.quotas.calendar().unwrap_or_default());
    if let Some(cluster) = cluster {
        admission = admission.clustered(cluster.sharing.clone(), cluster.slice_fraction());
    }
    let admission = Arc::new(admission);
    let tenants = registry.tenants();
    let adaptive = Arc::new(crate::adaptive_agent::AdaptiveAgent::new(
        config.adaptive.clone(),
        plan,
        tenants.clone(),
        admission.clone(),
        kafka_metrics.clone(),
        clock.clone(),
    ));
    let lag = lag_agent(config, lag_plan, tenants, cluster, clock);
    Controls {
        admission,
        adaptive,
        lag,
    }
}

/// The status page's board and the Prometheus metrics, both read from the produce path's
/// state and the agents (the metrics at scrape time).
pub(super) fn observability(
    config: &Config,
    ingest: &Ingest,
    registry: &Arc<RegistryStore>,
    controls: &Controls,
    kafka: KafkaMetrics,
    admin_failures: Arc<AuthFailures>,
    clock: &Arc<dyn Clock>,
) -> (Arc<crate::status::StatusBoard>, Metrics) {
    let status = Arc::new(crate::status::StatusBoard::new(
        ingest.tenants.clone(),
        ingest.admission.clone(),
        kafka.clone(),
        ingest.cluster.clone(),
        clock.clone(),
        config.buffer.ready_high_water,
    ));
    let agents = crate::metrics::Agents {
        adaptive: controls.adaptive.clone(),
        lag: controls.lag.clone(),
        registry: registry.clone(),
        idempotency: ingest.idempotency.clone(),
        tenant_series: crate::metrics::tenants::TenantSeries::new(
            ingest.tenants.clone(),
            ingest.admission.clone(),
            status.clone(),
            &config.metrics,
        ),
    };
    let metrics = Metrics::new(
        ingest.tenants.clone(),
        ingest.admission.clone(),
        kafka,
        [ingest.failures.clone(), admin_failures],
        ingest.inflight_bodies.clone(),
        ingest.cluster.clone(),
        agents,
    )
    .with_collector(Box::new(crate::metrics::auth::AuthCollector(
        ingest.auth.clone(),
    )))
    .with_collector(Box::new(crate::metrics::schemas::SchemaCollector(
        ingest.schemas.clone(),
    )))
    .with_collector(Box::new(crate::metrics::bodies::CodingCollector(
        ingest.codings.clone(),
    )))
    .with_collector(Box::new(crate::metrics::connections::ConnectionCollector(
        ingest.unverified.clone(),
    )));
    (status, metrics)
}

/// Keys live where a retry can find them: in Redis when replicas share budgets there (a retry
/// may land on any replica), in this process's memory otherwise.
pub(super) fn idempotency(
    config: &Config,
    clock: &Arc<dyn Clock>,
) -> Result<Idempotency, BuildError> {
    Ok(match &config.cluster.redis_url {
        Some(url) => Idempotency::clustered(
            &config.idempotency,
            Box::new(RedisIdempotencyStore::new(
                url,
                &config.cluster.key_prefix,
                (
                    Duration::from_millis(config.cluster.connect_timeout_ms),
                    Duration::from_millis(config.idempotency.command_timeout_ms),
                ),
                config.idempotency.max_keys_per_tenant,
            )?),
            clock.clone(),
        ),
        None => Idempotency::in_memory(&config.idempotency, clock.clone()),
    })
}

/// The lag guards' agent: offsets from Kafka, the cap split over the members counted.
pub(super) fn lag_agent(
    config: &Config,
    plan: Arc<crate::lag::LagPlanCell>,
    tenants: &Arc<crate::tenant::Tenants>,
    cluster: Option<&Arc<Cluster>>,
    clock: &Arc<dyn Clock>,
) -> Arc<crate::lag_agent::LagAgent> {
    let members = match cluster {
        Some(c) => {
            let c = c.clone();
            crate::lag_agent::Members(Arc::new(move || {
                c.stats.members.load(std::sync::atomic::Ordering::Relaxed)
            }))
        }
        None => crate::lag_agent::Members::one(),
    };
    Arc::new(crate::lag_agent::LagAgent::new(
        config.lag_guards.clone(),
        plan,
        tenants.clone(),
        members,
        Arc::new(crate::kafka::KafkaOffsets::new(
            crate::kafka::connection_config(&config.kafka),
        )),
        clock.clone(),
    ))
}

/// The token `/metrics` requires: given, read from `[metrics] token_env`, or none.
pub(super) fn scrape_token(
    config: &Config,
    given: Option<String>,
) -> Result<Option<String>, BuildError> {
    match (&config.metrics.token_env, given) {
        (_, Some(token)) => Ok(Some(token)),
        (None, None) => Ok(None),
        (Some(name), None) => crate::access::scrape_token_from_env(name)
            .map(Some)
            .map_err(BuildError::MetricsToken),
    }
}

/// Where the quotas' counts are kept across restarts, if `[quotas] state_file` says.
pub(super) fn quota_keeping(config: &Config) -> super::QuotaKeeping {
    super::QuotaKeeping {
        file: config
            .quotas
            .state_file
            .as_deref()
            .map(|path| Arc::new(crate::quota_file::QuotaFile::new(path))),
        save_ms: config.quotas.save_ms,
        counts_apart: config.cluster.counts_apart(),
    }
}

/// Usage by tenant and hour (`[usage]`), on the budgets' clock and the quotas' calendar, and
/// its export if `[usage] topic` is set.
pub(super) fn usage_ledger(
    config: &Config,
    tenants: &Arc<crate::tenant::Tenants>,
    clock: &Arc<dyn Clock>,
    produce_port: u16,
) -> Result<Arc<crate::usage::Ledger>, BuildError> {
    let settings = crate::usage::Settings {
        tick: Duration::from_millis(config.usage.tick_ms),
        retention_hours: config.usage.retention_hours,
        max_rows: config.usage.max_rows,
    };
    // Validated with the configuration: a bad offset never gets here.
    let calendar = config.quotas.calendar().unwrap_or_default();
    let ledger = crate::usage::Ledger::new(tenants.clone(), clock.clone(), calendar, settings);
    let Some(topic) = &config.usage.topic else {
        return Ok(Arc::new(ledger));
    };
    let log = crate::kafka::log::LogTopic::new(
        crate::kafka::connection_config(&config.kafka),
        topic,
        Duration::from_secs(10),
        None,
    )
    .map_err(|e| BuildError::UsageExport(e.to_string()))?;
    let who = Settings::from_config(&config.cluster, produce_port);
    let every = Duration::from_millis(config.usage.export_ms);
    let export = crate::usage::export::Export::new(log, &who.replica_id, &who.instance, every);
    Ok(Arc::new(ledger.exported(export)))
}

/// The topics no tenant may write: `[kafka] internal_topics`, and the usage export's.
pub(super) fn internal_topics(config: &Config) -> Vec<String> {
    let mut topics = config.kafka.internal_topics.clone();
    topics.extend(config.usage.topic.clone());
    topics
}
