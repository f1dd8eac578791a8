//! floodgate: an HTTP ingest gateway in front of Kafka that refuses exactly and never queues
//! without bound.
//!
//! Modules by layer, lowest first. A module may import modules of its own layer or below,
//! never above (docs/ARCHITECTURE.md draws the same picture with one request's path):
//!
//! 1. Foundations — import nothing of floodgate's but each other, as listed:
//!    [`record`] (records and the `Charge` they make), [`refusal`] (why a request is not
//!    admitted), [`identity`] (tenant ids, key digests, topics, topic patterns), [`access`]
//!    (admin tokens), [`budget`] (GCRA token buckets; uses `record`), [`buffer`] (the bounded
//!    downstream buffer; uses `record`), [`body_budget`] (request bodies in memory),
//!    [`failure_guard`] (per-address limit on failed authentications; uses `budget`),
//!    [`forwarded`] (the client's address behind trusted proxies), [`server`] and [`tls`]
//!    (bounded accept loop).
//! 2. Configuration — [`config`]: the typed, validated configuration file; then the pure
//!    controllers built on it: [`adaptive`] (the adaptive limit and its split by priority)
//!    and [`lag`] (lag guards: offsets in, a cap on producers out).
//! 3. Domain — [`tenant`] (live tenants and the key registry), [`body`] (the `/v1` body
//!    decoder), [`kafka`] (settings, the shared producer, delivery reports, topic catalog,
//!    Kafka statistics), [`schema`] (Schema Registry schemas and the topics' data contracts).
//! 4. Decisions and state — [`admission`] (the atomic admit-or-refuse decision),
//!    [`registry`] (the registry's declarative state, its changes, audit and persistence),
//!    [`idempotency`] (`Idempotency-Key`: the keys in flight, stored answers in memory or
//!    Redis),
//!    [`metrics`] (Prometheus, read from live state), the agents that feed the controllers:
//!    [`adaptive_agent`] (Kafka's signals) and [`lag_agent`] (consumer-group offsets), and
//!    [`cluster`] (budgets shared through Redis).
//! 5. Outcomes and pipeline — [`outcome`] (every status and body decided once), then
//!    [`ingest`] (the produce pipeline every wire format shares).
//! 6. Assembly — [`app`] (the shared state), [`ratelimit_headers`] (the IETF fields).
//! 7. HTTP edges — [`http`] (produce routes, one adapter per wire format), [`admin`] (admin
//!    routes), [`reload`] (SIGHUP), [`telemetry`] (logging), [`dev`] (the embedded broker).

pub mod access;
pub mod adaptive;
pub mod adaptive_agent;
pub mod admin;
pub mod admission;
pub mod agent;
pub mod app;
pub mod body;
pub mod body_budget;
pub mod budget;
pub mod buffer;
pub mod cluster;
pub mod config;
pub mod credential;
pub mod dev;
pub mod failure_guard;
pub mod forwarded;
pub mod http;
pub mod idempotency;
pub mod identity;
pub mod ingest;
pub mod kafka;
pub mod lag;
pub mod lag_agent;
pub mod metrics;
pub mod outcome;
pub mod ratelimit_headers;
pub mod record;
pub mod refusal;
pub mod registry;
pub mod reload;
pub mod schema;
pub mod server;
pub mod status;
pub mod telemetry;
pub mod tenant;
pub mod tls;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use crate::app::{AppState, BuildError};
use crate::budget::Clock;
use crate::server::ConnectionBounds;

/// The two sockets floodgate serves; bound by the caller so tests can use port 0.
#[derive(Debug)]
pub struct Listeners {
    pub produce: TcpListener,
    pub admin: TcpListener,
}

impl Listeners {
    pub async fn bind(config: &config::Config) -> std::io::Result<Self> {
        Ok(Self {
            produce: TcpListener::bind(config.server.listen).await?,
            admin: TcpListener::bind(config.server.admin_listen).await?,
        })
    }
}

/// What a run needs besides its configuration.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The budgets' clock: monotonic in production, stepped by hand in tests.
    pub clock: Arc<dyn Clock>,
    /// The configuration file, re-read on SIGHUP; `None` disables reloading.
    pub config_path: Option<std::path::PathBuf>,
    /// Admin tokens to use instead of reading `[admin] token_env` (for embedding and tests,
    /// which must not mutate the process environment).
    pub admin_tokens: Option<access::AdminTokens>,
    /// Cluster mode: the clock the shared buckets in Redis count on. `None` (production):
    /// Redis's own clock, one for every replica. Tests pass a clock they step.
    pub cluster_clock: Option<Arc<dyn Clock>>,
    /// The shared registry's secrets, instead of reading `[cluster] registry_secret_env` (for
    /// embedding and tests).
    pub registry_secrets: Option<registry::RegistrySecrets>,
    /// The `/metrics` token, instead of reading `[metrics] token_env`.
    pub metrics_token: Option<String>,
}

impl RunOptions {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            config_path: None,
            admin_tokens: None,
            cluster_clock: None,
            registry_secrets: None,
            metrics_token: None,
        }
    }
}

/// Aborts the tasks a run started when the run itself is dropped.
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Records accepted (200/202) that Kafka had not confirmed when the time ran out.
    pub unconfirmed_records: i32,
}

/// Runs the gateway until `shutdown` resolves, then drains within `[server] shutdown_timeout`.
pub async fn run(
    config: config::Config,
    listeners: Listeners,
    options: RunOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ShutdownReport, BuildError> {
    let tokens = match options.admin_tokens {
        Some(tokens) => tokens,
        None => access::AdminTokens::from_env(&config.admin.token_env)
            .map_err(BuildError::AdminTokens)?,
    };
    for w in config.warnings() {
        tracing::warn!(key = %w.key, "configuration: {}", w.message);
    }
    let produce_port = listeners.produce.local_addr().map_or(0, |a| a.port());
    // The tenants become the registry's, moved (a copy of 100,000 would double start-up's
    // peak); what the rest of the run reads of the file is its other sections.
    let mut config = config;
    let file = registry::FilePart::take(&mut config);
    let config = config;
    let state = Arc::new(AppState::build(
        &config,
        options.clock,
        tokens,
        app::BuildOptions {
            produce_port,
            clock: options.cluster_clock,
            registry_secrets: options.registry_secrets,
            metrics_token: options.metrics_token,
            file: Some(file),
        },
    )?);
    // Dropping this future (an embedder giving up on it) stops what it started, as a killed
    // process would: no drain, no goodbyes.
    let mut tasks = AbortOnDrop(Vec::new());
    // A shared registry is read (and followed) from the registry topic; readiness says
    // `registry_loading` until it has caught up.
    tasks
        .0
        .push(tokio::spawn(state.registry.clone().follow()).abort_handle());
    tasks.0.push(state.adaptive.start().abort_handle());
    tasks.0.push(state.lag.start().abort_handle());
    // The status page's history is kept whether or not anyone looks.
    tasks.0.push(state.status.start().abort_handle());
    // A cluster member joins before it serves, so its first requests use the shared budgets.
    if let Some(cluster) = &state.ingest.cluster {
        cluster.join().await?;
        tasks.0.push(cluster.start().abort_handle());
    }
    // Cluster mode: keys live in Redis; connect before serving so the first keyed requests
    // find it (if it is away, the renewer keeps trying and keyed requests follow
    // `[idempotency] on_store_error` meanwhile).
    let idempotency = state.ingest.idempotency.clone();
    if let Err(error) = idempotency.connect().await {
        tracing::warn!(%error, "idempotency: Redis unreachable at start");
    }
    if let Some(renewer) = idempotency.start() {
        tasks.0.push(renewer.abort_handle());
    }
    if let Some(path) = options.config_path {
        tokio::spawn(reload::on_sighup(state.clone(), config.clone(), path));
    }
    // Issuers' JWKS are fetched now and kept fresh.
    tasks.0.extend(state.ingest.auth.start());
    // Client certificates are asked for on the produce listener only.
    let (tls, admin_tls) = match (&config.server.tls_cert_file, &config.server.tls_key_file) {
        (Some(cert), Some(key)) => {
            let client =
                config
                    .server
                    .tls_client_ca_file
                    .as_deref()
                    .map(|ca_file| tls::ClientAuth {
                        ca_file,
                        required: config.server.require_client_cert,
                    });
            (
                Some(tls::acceptor(cert, key, client)?),
                Some(tls::acceptor(cert, key, None)?),
            )
        }
        _ => (None, None),
    };
    let bounds = ConnectionBounds {
        max_connections: config.server.max_connections,
        header_read_timeout: Duration::from_millis(config.server.header_read_timeout_ms),
        idle_timeout: Duration::from_millis(config.server.idle_timeout_ms),
        max_header_bytes: config.server.max_header_bytes,
        http2_max_streams: config.server.http2_max_streams,
        tls,
    };
    let shutdown_timeout = config.shutdown_timeout();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    tracing::info!(
        produce = %listeners.produce.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        admin = %listeners.admin.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        "floodgate listening"
    );
    let produce = tokio::spawn(server::serve(
        listeners.produce,
        http::router(state.clone()),
        bounds.clone(),
        stopped(stop_rx.clone()),
        shutdown_timeout,
    ));
    let admin = tokio::spawn(server::serve(
        listeners.admin,
        admin::router(state.clone()),
        ConnectionBounds {
            tls: admin_tls,
            ..bounds
        },
        stopped(stop_rx),
        shutdown_timeout,
    ));
    tasks.0.push(produce.abort_handle());
    tasks.0.push(admin.abort_handle());

    // A cluster member that finds, once Redis answers, a live replica holding its id stops as
    // a start-up refusal would (see `cluster`), but drains first like any shutdown.
    let refused = async {
        match &state.ingest.cluster {
            Some(cluster) => Some(cluster.refused().await),
            None => std::future::pending().await,
        }
    };
    let refused = tokio::select! {
        () = shutdown => None,
        refused = refused => refused,
    };
    if refused.is_some() {
        tracing::error!("cluster: stopping — another live replica holds this replica_id");
    }
    let deadline = Instant::now() + shutdown_timeout;
    tracing::info!("shutdown: refusing new requests, draining open ones");
    state.start_draining();
    let _ = stop_tx.send(true);
    if !matches!(produce.await, Ok(true)) {
        tracing::warn!("shutdown: some produce connections were still open at the deadline");
    }
    let producer = state.ingest.producer.clone();
    let remaining = deadline.saturating_duration_since(Instant::now());
    let flushed = tokio::task::spawn_blocking(move || {
        let result = producer.flush(remaining);
        (result, producer.in_flight())
    })
    .await;
    let unconfirmed = match flushed {
        Ok((Ok(()), _)) => 0,
        Ok((Err(error), in_flight)) => {
            tracing::error!(%error, unconfirmed_records = in_flight,
                "shutdown: Kafka did not confirm every accepted record in time");
            in_flight
        }
        Err(_) => state.ingest.producer.in_flight(),
    };
    // The flush gave every pending keyed request its outcome: let them store their answers
    // (a retry after the restart finds them), within what is left of the deadline.
    let deadline = tokio::time::Instant::from_std(deadline.max(Instant::now()));
    if !idempotency.landed(deadline).await {
        tracing::warn!(
            in_flight = idempotency.in_flight(),
            "shutdown: some answers to requests with an Idempotency-Key were not stored in time"
        );
    }
    if let Some(cluster) = &state.ingest.cluster {
        cluster.leave().await;
    }
    let _ = admin.await;
    tracing::info!(unconfirmed_records = unconfirmed, "shutdown complete");
    if let Some(refused) = refused {
        return Err(BuildError::Join(refused));
    }
    Ok(ShutdownReport {
        unconfirmed_records: unconfirmed,
    })
}
