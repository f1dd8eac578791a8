//! One run of the gateway: the shared state built, the background tasks started, both
//! listeners served, and on shutdown the drain that keeps every acknowledged record.
//!
//! Layer: HTTP edges. Imports the assembly (`app`), the edges' routers and the accept loop.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::app::{AppState, BuildError};
use crate::budget::Clock;
use crate::config::{Config, ServerConfig};
use crate::server::ConnectionBounds;
use crate::{access, admin, app, http, registry, reload, server, tls};

/// The two sockets floodgate serves; bound by the caller so tests can use port 0.
#[derive(Debug)]
pub struct Listeners {
    pub produce: TcpListener,
    pub admin: TcpListener,
}

impl Listeners {
    pub async fn bind(config: &Config) -> std::io::Result<Self> {
        Ok(Self {
            produce: bind_listener(config.server.listen)?,
            admin: bind_listener(config.server.admin_listen)?,
        })
    }
}

/// Connections the kernel may hold for the accept loop (`listen(2)`'s backlog; Linux caps it at
/// `net.core.somaxconn`, 4,096 by default). The standard library's 128 was full whenever
/// clients reconnected as fast as a full listener closed their connections: a new client's
/// SYN was dropped, and it waited for its retransmissions, 1, 3 or 7 s (review 41-r3 of #37:
/// probes of the admin listener waited 3.4–5.0 s under 200 addresses' reconnecting
/// connections). Queued, a newcomer waits its turn among them instead.
pub const LISTEN_BACKLOG: u32 = 4_096;

/// A listener on `addr` with [`LISTEN_BACKLOG`], reusing the address as `TcpListener::bind`
/// does (a restart binds again at once).
pub fn bind_listener(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
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
    config: Config,
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
    let mut tasks = start_tasks(&state).await?;
    if let Some(path) = options.config_path {
        // Stopped with the run (see `reload::on_sighup`): a stopped gateway must not reload.
        let reloader = reload::on_sighup(state.clone(), config.clone(), path);
        tasks.0.push(tokio::spawn(reloader).abort_handle());
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (produce, admin) = serve_listeners(&state, &config, listeners, stop_rx)?;
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
    let deadline = Instant::now() + config.shutdown_timeout();
    tracing::info!("shutdown: refusing new requests, draining open ones");
    state.start_draining();
    let _ = stop_tx.send(true);
    if !matches!(produce.await, Ok(true)) {
        tracing::warn!("shutdown: some produce connections were still open at the deadline");
    }
    let unconfirmed = drain(&state, deadline).await;
    let _ = admin.await;
    tracing::info!(unconfirmed_records = unconfirmed, "shutdown complete");
    if let Some(refused) = refused {
        return Err(BuildError::Join(refused));
    }
    Ok(ShutdownReport {
        unconfirmed_records: unconfirmed,
    })
}

/// The background tasks a run keeps: the registry's follower, the agents, the status
/// sampler, cluster membership, the idempotency renewer and the issuers' key refresh.
async fn start_tasks(state: &Arc<AppState>) -> Result<AbortOnDrop, BuildError> {
    let mut tasks = AbortOnDrop(Vec::new());
    // A shared registry is read (and followed) from the registry topic; readiness says
    // `registry_loading` until it has caught up.
    tasks
        .0
        .push(tokio::spawn(state.registry.clone().follow()).abort_handle());
    if let Some(file) = &state.quotas.file {
        tasks.0.push(keep_quota_counts(state, file).abort_handle());
    }
    tasks.0.push(state.adaptive.start().abort_handle());
    tasks.0.push(state.lag.start().abort_handle());
    // The status page's history and the usage ledger are kept whether or not anyone looks.
    tasks.0.push(state.status.start().abort_handle());
    tasks
        .0
        .extend(state.usage.start().iter().map(|t| t.abort_handle()));
    // A cluster member joins before it serves, so its first requests use the shared budgets.
    if let Some(cluster) = &state.ingest.cluster {
        cluster.join().await?;
        tasks.0.push(cluster.start().abort_handle());
    }
    // Cluster mode: keys live in Redis; connect before serving so the first keyed requests
    // find it (if it is away, the renewer keeps trying and keyed requests follow
    // `[idempotency] on_store_error` meanwhile).
    let idempotency = &state.ingest.idempotency;
    if let Err(error) = idempotency.connect().await {
        tracing::warn!(%error, "idempotency: Redis unreachable at start");
    }
    if let Some(renewer) = idempotency.start() {
        tasks.0.push(renewer.abort_handle());
    }
    // Issuers' JWKS are fetched now and kept fresh.
    tasks.0.extend(state.ingest.auth.start());
    Ok(tasks)
}

/// The TLS acceptors of the produce and admin listeners, if `[server]` configures TLS: client
/// certificates are asked for on the produce listener only. `check-config` reads the files
/// through this too.
pub fn tls_acceptors(
    server: &ServerConfig,
) -> Result<(Option<TlsAcceptor>, Option<TlsAcceptor>), tls::TlsError> {
    let (Some(cert), Some(key)) = (&server.tls_cert_file, &server.tls_key_file) else {
        return Ok((None, None));
    };
    let client = server
        .tls_client_ca_file
        .as_deref()
        .map(|ca_file| tls::ClientAuth {
            ca_file,
            required: server.requires_client_cert(),
        });
    Ok((
        Some(tls::acceptor(cert, key, client)?),
        Some(tls::acceptor(cert, key, None)?),
    ))
}

type Served = tokio::task::JoinHandle<bool>;

/// Both listeners served until `stop` turns true; each handle says whether its connections
/// had all closed by the deadline.
fn serve_listeners(
    state: &Arc<AppState>,
    config: &Config,
    listeners: Listeners,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(Served, Served), BuildError> {
    let (tls, admin_tls) = tls_acceptors(&config.server)?;
    let s = &config.server;
    let descriptors = crate::descriptors::prepare(s.max_connections);
    state.ingest.unverified.fit_to(
        descriptors.max_connections.min(s.max_connections),
        s.max_connections,
    );
    if descriptors.clamped(s.max_connections) {
        tracing::warn!(
            unauthenticated_per_address = state.ingest.unverified.allowance(),
            max_connections = s.max_connections,
            serving = descriptors.max_connections,
            descriptors = descriptors.soft,
            hard_limit = descriptors.hard,
            "[server] max_connections does not fit in the process's descriptor limit (two \
             listeners plus {} for Kafka, Redis and the rest): each listener serves fewer; \
             raise the hard limit (LimitNOFILE=, ulimit -Hn) to serve them all",
            crate::descriptors::HEADROOM
        );
    } else if descriptors.soft > descriptors.soft_before {
        tracing::info!(
            from = descriptors.soft_before,
            to = descriptors.soft,
            "descriptor limit raised to the hard limit"
        );
    }
    let bounds = ConnectionBounds {
        max_connections: descriptors.max_connections,
        header_read_timeout: Duration::from_millis(s.header_read_timeout_ms),
        idle_timeout: Duration::from_millis(s.idle_timeout_ms),
        max_header_bytes: s.max_header_bytes,
        http2_max_streams: s.http2_max_streams,
        tls,
        unverified: Some(state.ingest.unverified.clone()),
    };
    let shutdown_timeout = config.shutdown_timeout();
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
        stopped(stop.clone()),
        shutdown_timeout,
    ));
    let admin_max = bounds.max_connections.min(ADMIN_MAX_CONNECTIONS);
    let admin = tokio::spawn(server::serve(
        listeners.admin,
        admin::router(state.clone()),
        ConnectionBounds {
            max_connections: admin_max,
            tls: admin_tls,
            unverified: Some(admin_unverified(&state.ingest.proxies, admin_max)),
            ..bounds
        },
        stopped(stop),
        shutdown_timeout,
    ));
    Ok((produce, admin))
}

/// Connections the admin listener serves: operators, probes and scrapes, not producers; 4,096
/// connections each keeping an unfinished head held ~800 MiB (review 35b of #37). At most
/// this many, each within `max_header_bytes`.
const ADMIN_MAX_CONNECTIONS: usize = 256;

/// The admin listener's connections are counted by address until they send a request
/// (`admin::a_client`), and a full listener makes room as the produce listener does
/// (`server::unverified`): a newcomer closes the oldest silent connection of the address
/// holding the most. Without it, one client's 256 silent connections held every slot and
/// `/healthz` waited 9–10 s in the backlog for their first-request timeout (review 38b of
/// #37), past the probes' 2–3 s. No address is refused at accept for its number: a probe or
/// an operator's script may open many at once (a hundred probes from one address).
fn admin_unverified(
    proxies: &crate::forwarded::TrustedProxies,
    serving: usize,
) -> Arc<server::Unverified> {
    // Connections that sent a request are counted by source (`admin::a_client`), never
    // refused for their number; a full listener closes the oldest idle one of the source
    // holding the most, once it holds more than its share (among the sources holding some and
    // those whose connections all wait).
    let unverified =
        server::Unverified::new(serving, serving, proxies.clone()).sharing_with_waiters();
    unverified.fit_to(serving, serving);
    unverified
}

/// Reads the quota counts a previous run kept, then writes them every `[quotas] save_ms`
/// (off the request workers). A file that cannot be read is logged and left alone: the counts
/// start from zero and the next save replaces it.
fn keep_quota_counts(
    state: &Arc<AppState>,
    file: &Arc<crate::quota_file::QuotaFile>,
) -> tokio::task::JoinHandle<()> {
    let tenants = state.ingest.tenants.clone();
    let global = state.ingest.admission.global.clone();
    let every = std::time::Duration::from_millis(state.quotas.save_ms);
    match file.load_into(&tenants, &global.quotas) {
        Ok(n) => tracing::info!(tenants = n, "quotas: counts of the windows read back"),
        Err(e) => {
            tracing::error!(error = %e, "quotas: the kept counts cannot be read; counting from zero")
        }
    }
    let file = file.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let (file, tenants, global) = (file.clone(), tenants.clone(), global.clone());
            match tokio::task::spawn_blocking(move || file.save(&tenants, &global.quotas)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "quotas: counts not saved"),
                Err(_) => {}
            }
        }
    })
}

/// After the listeners closed: Kafka's confirmations awaited until `deadline`, then the keyed
/// requests' answers stored (a retry after the restart finds them), then the cluster left.
/// Returns the accepted records Kafka had not confirmed.
async fn drain(state: &AppState, deadline: Instant) -> i32 {
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
    // The flush gave every pending keyed request its outcome: let them store their answers,
    // within what is left of the deadline.
    let idempotency = &state.ingest.idempotency;
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
    // Every request has been answered: what they used is final for this run.
    state.usage.flush(std::time::Duration::from_secs(5)).await;
    if let Some(file) = state.quotas.file.clone() {
        // Every request has been answered: what the windows used is final for this run.
        let tenants = state.ingest.tenants.clone();
        let global = state.ingest.admission.global.clone();
        match tokio::task::spawn_blocking(move || file.save(&tenants, &global.quotas)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "shutdown: quota counts not saved"),
            Err(e) => tracing::error!(error = %e, "shutdown: quota counts not saved"),
        }
    }
    unconfirmed
}
