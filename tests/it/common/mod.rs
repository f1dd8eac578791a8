//! Shared test harness: a gateway running in-process on loopback ports, a real Kafka-protocol
//! broker (Tansu, started by scripts/test.sh) or librdkafka's mock cluster, and a consumer that
//! reads records back by assigning partitions from offset 0.

pub mod codings;
pub mod delay_proxy;
pub mod exposition;
pub mod faults;
pub mod idp;
pub mod load;
pub mod schema_registry;
pub mod v3;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::access::AdminTokens;
use floodgate::budget::{Clock, ManualClock, MonotonicClock};
use floodgate::config::{Config, TenantConfig};
use floodgate::identity::ApiKeyHash;
use floodgate::{Listeners, ShutdownReport};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::mocking::MockCluster;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use reqwest::Method;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const KEY: &str = "test-key-acme";
/// Admin tokens of every test gateway: id "ops".
pub const ADMIN_TOKENS: &str = "ops:test-admin-token";
pub const ADMIN_TOKEN: &str = "test-admin-token";
/// The shared registry's secret of every test gateway (and of the `registry` commands the
/// tests run, through this variable).
pub const REGISTRY_SECRET: &str = "test-registry-secret-0123456789";
pub const REGISTRY_SECRET_ENV: &str = "FLOODGATE_TEST_REGISTRY_SECRET";

/// Held by the tests that measure rates and latency on the real clock (`mock::adaptive`,
/// `mock::lag_guard`, `tansu::adaptive_recovery`): a small machine runs one of them at a time. (scripts/test.sh also runs
/// them after the rest of the suite, so nothing else shares the machine with them.)
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A loopback port nobody listens on (for a process the test starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A Redis key prefix of the test's own (and this process's).
pub fn redis_prefix(test: &str) -> String {
    format!("fgtest-{test}-{}", std::process::id())
}

/// The Redis started by scripts/test.sh (shared by tests: give each its own key prefix).
pub fn redis_url() -> String {
    std::env::var("FLOODGATE_TEST_REDIS").unwrap_or_else(|_| {
        panic!("FLOODGATE_TEST_REDIS is not set: run the suite with scripts/test.sh, which starts Redis")
    })
}

/// A Redis of the test's own, for tests that stop it: in memory, loopback, on a free port,
/// killed (by its PID) when dropped.
pub struct OwnRedis {
    pub port: u16,
    child: Option<std::process::Child>,
    /// Settings of the test's own (e.g. `--maxmemory 4mb`).
    args: Vec<String>,
}

impl OwnRedis {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> Self {
        let mut own = Self {
            port: free_port(),
            child: None,
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        own.restart();
        own
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port and waits until it answers.
    pub fn restart(&mut self) {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install -y redis-server)");
        self.child = Some(child);
        let patience = (Duration::from_secs(5), Duration::from_millis(20));
        wait_for_port(self.port, patience, "redis-server");
    }

    /// Kills it (SIGKILL, by PID).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Tansu broker started by scripts/test.sh.
pub fn tansu() -> String {
    std::env::var("FLOODGATE_TEST_BROKER").unwrap_or_else(|_| {
        panic!("FLOODGATE_TEST_BROKER is not set: run the suite with scripts/test.sh, which starts Tansu")
    })
}

/// Every record of `topic` on Tansu, read back as [`read_back`] does (off the runtime's threads).
pub async fn read_tansu(topic: &str, partitions: i32, expected: usize) -> Vec<Consumed> {
    read_all(&tansu(), topic, partitions, expected).await
}

/// [`read_back`] from an async test: the consumer polls on a blocking thread, so the gateway
/// running on the test's runtime keeps being served meanwhile.
pub async fn read_all(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> Vec<Consumed> {
    let (b, t) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || read_back(&b, &t, partitions, expected))
        .await
        .expect("reader")
}

/// The records' values as text (an absent value as ""), in the order given: what most tests
/// compare against what they sent.
pub fn value_texts(records: &[Consumed]) -> Vec<String> {
    records
        .iter()
        .map(|c| String::from_utf8_lossy(c.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

/// A topic name no other test uses.
pub fn unique_topic(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}.{}.{}.{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0)
    )
}

/// A topic of the test's own on Tansu, with `partitions`, created and visible in its metadata.
pub async fn tansu_topic(prefix: &str, partitions: i32) -> String {
    let topic = unique_topic(prefix);
    create_topic(&tansu(), &topic, partitions).await;
    topic
}

/// A topic of the test's own on Tansu (see [`tansu_topic`]) and a gateway on Tansu with the
/// test configuration: how most tests of what reaches Kafka start.
pub async fn on_tansu(prefix: &str, partitions: i32) -> (String, Gateway) {
    let topic = tansu_topic(prefix, partitions).await;
    (topic, Gateway::start(config(&tansu())).await)
}

pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<_> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create_topics");
    for r in results {
        r.expect("topic created");
    }
    // A created topic shows in the broker's metadata a moment later; the gateway (rightly)
    // answers 404 until it does, so wait for it here.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let visible = admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(2))
            .map(|m| {
                m.topics().iter().any(|t| {
                    t.name() == topic
                        && t.error().is_none()
                        && t.partitions().len() == partitions as usize
                })
            })
            .unwrap_or(false);
        if visible {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "topic {topic} never appeared in metadata"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Gives the first tenant ("acme") a records budget: `per_sec` refilled, `burst` at most at once.
/// Most budget tests start from one.
pub fn limit_records(cfg: &mut Config, per_sec: u64, burst: u64) {
    cfg.tenants[0].records_per_sec = Some(per_sec);
    cfg.tenants[0].records_burst = Some(burst);
}

/// Gives the first tenant ("acme") a bytes budget, as [`limit_records`] does records.
pub fn limit_bytes(cfg: &mut Config, per_sec: u64, burst: u64) {
    cfg.tenants[0].bytes_per_sec = Some(per_sec);
    cfg.tenants[0].bytes_burst = Some(burst);
}

pub fn tenant(id: &str, key: &str, topics: &[&str]) -> TenantConfig {
    TenantConfig {
        id: id.into(),
        api_key_sha256: vec![ApiKeyHash::of_key(key).to_hex()],
        topics: topics.iter().map(|t| t.to_string()).collect(),
        ..TenantConfig::default()
    }
}

/// librdkafka's in-process mock cluster, for fault injection.
pub type Cluster = MockCluster<'static, rdkafka::producer::DefaultProducerContext>;

/// A one-broker mock cluster with these single-partition topics.
pub fn mock_cluster(topics: &[&str]) -> Cluster {
    let cluster = MockCluster::new(1).expect("mock cluster");
    for topic in topics {
        cluster.create_topic(topic, 1, 1).expect("topic");
    }
    cluster
}

/// Which clock a test gateway's budgets follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Time {
    Real,
    /// Stepped by the test ([`Gateway::advance_ms`]).
    Manual,
}

/// The usual set-up: a mock cluster with `topic`, and a gateway on it with the tenant "acme"
/// (key [`KEY`], topics `test.*`), after `edit` has adjusted the configuration.
pub async fn gateway_on_mock(
    topic: &str,
    time: Time,
    edit: impl FnOnce(&mut Config),
) -> (Cluster, Gateway) {
    let cluster = mock_cluster(&[topic]);
    let mut cfg = config(&cluster.bootstrap_servers());
    edit(&mut cfg);
    let gw = match time {
        Time::Real => Gateway::start(cfg).await,
        Time::Manual => Gateway::start_manual(cfg).await,
    };
    (cluster, gw)
}

/// [`gateway_on_mock`] on a clock the test steps, the tenant's records budget `per_sec`,
/// `burst` at once: how most budget tests start.
pub async fn gateway_with_records(topic: &str, per_sec: u64, burst: u64) -> (Cluster, Gateway) {
    gateway_on_mock(topic, Time::Manual, |cfg| {
        limit_records(cfg, per_sec, burst)
    })
    .await
}

/// [`gateway_with_records`] for a bytes budget.
pub async fn gateway_with_bytes(topic: &str, per_sec: u64, burst: u64) -> (Cluster, Gateway) {
    gateway_on_mock(topic, Time::Manual, |cfg| limit_bytes(cfg, per_sec, burst)).await
}

/// A configuration for tests: loopback listeners (bound by the harness), a tenant "acme"
/// with key [`KEY`] allowed on `test.*`, small timeouts.
pub fn config(bootstrap: &str) -> Config {
    let mut c = Config::from_toml_with_env("", Vec::new()).expect("defaults are valid");
    c.kafka.bootstrap_servers = bootstrap.to_string();
    c.kafka.delivery_timeout_ms = 10_000;
    c.server.shutdown_timeout_ms = 10_000;
    c.tenants = vec![tenant("acme", KEY, &["test.*"])];
    c
}

/// Run options as every test gateway has them: budgets on `clock`, the admin tokens
/// [`ADMIN_TOKENS`]. For tests that add options of their own.
pub fn run_options(clock: Arc<dyn Clock>) -> floodgate::RunOptions {
    let mut options = floodgate::RunOptions::new(clock);
    options.admin_tokens = Some(AdminTokens::parse(ADMIN_TOKENS).expect("tokens"));
    options
}

/// [`run_options`] on the monotonic clock.
pub fn monotonic_options() -> floodgate::RunOptions {
    run_options(Arc::new(MonotonicClock::new()))
}

/// The options of a cluster member: budgets and the shared buckets in Redis follow `clock`.
pub fn clustered_options(clock: &Arc<ManualClock>) -> floodgate::RunOptions {
    let mut options = run_options(clock.clone());
    options.cluster_clock = Some(clock.clone());
    options
}

/// A produce and an admin listener on free loopback ports, for `floodgate::run`.
pub async fn loopback_listeners() -> Listeners {
    let any = "127.0.0.1:0".parse().expect("addr");
    Listeners {
        produce: floodgate::run::bind_listener(any).expect("bind"),
        admin: floodgate::run::bind_listener(any).expect("bind"),
    }
}

/// The test [`config`] on Tansu, with what `toml` says read first: for sections a test writes as
/// an operator would (a Schema Registry, contracts).
pub fn config_with_toml(toml: &str) -> Config {
    let mut cfg = Config::from_toml_with_env(toml, Vec::new())
        .unwrap_or_else(|e| panic!("the test configuration is refused: {e}\n{toml}"));
    let base = config(&tansu());
    cfg.kafka.bootstrap_servers = base.kafka.bootstrap_servers;
    cfg.kafka.delivery_timeout_ms = base.kafka.delivery_timeout_ms;
    cfg.server.shutdown_timeout_ms = base.server.shutdown_timeout_ms;
    cfg.tenants = base.tenants;
    cfg
}

pub struct Gateway {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub clock: Option<Arc<ManualClock>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<ShutdownReport>>,
}

impl Gateway {
    /// Starts a gateway on the monotonic clock.
    pub async fn start(config: Config) -> Self {
        Self::start_with(config, None).await
    }

    /// Starts a gateway with full options (admin tokens, config path for SIGHUP).
    pub async fn start_options(config: Config, options: floodgate::RunOptions) -> Self {
        Self::launch(config, options, None).await
    }

    /// Starts a gateway whose budgets follow a clock the test steps.
    pub async fn start_manual(config: Config) -> Self {
        Self::start_with(config, Some(Arc::new(ManualClock::new()))).await
    }

    /// Starts a gateway on a clock the test steps, its wall clock at the Unix second `unix_s`
    /// (calendar quotas).
    pub async fn start_at_unix(config: Config, unix_s: u64) -> Self {
        Self::start_with(config, Some(Arc::new(ManualClock::at_unix_s(unix_s)))).await
    }

    /// Starts a cluster member: budgets and the shared buckets in Redis follow `clock`, which
    /// the test steps (and may share between members).
    pub async fn start_clustered(config: Config, clock: Arc<ManualClock>) -> Self {
        Self::launch(config, clustered_options(&clock), Some(clock)).await
    }

    async fn start_with(config: Config, manual: Option<Arc<ManualClock>>) -> Self {
        let clock: Arc<dyn Clock> = match &manual {
            Some(m) => m.clone(),
            None => Arc::new(MonotonicClock::new()),
        };
        Self::launch(config, run_options(clock), manual).await
    }

    async fn launch(
        config: Config,
        mut options: floodgate::RunOptions,
        manual: Option<Arc<ManualClock>>,
    ) -> Self {
        if options.registry_secrets.is_none() {
            options.registry_secrets =
                Some(floodgate::registry::RegistrySecrets::parse(REGISTRY_SECRET).expect("secret"));
        }
        let listeners = loopback_listeners().await;
        let addr = listeners.produce.local_addr().expect("addr");
        let admin = listeners.admin.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            floodgate::run(config, listeners, options, async {
                let _ = stopped.await;
            })
            .await
            .expect("gateway runs")
        });
        Self {
            addr,
            admin,
            clock: manual,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    pub fn url(&self, topic: &str) -> String {
        format!("http://{}/v1/topics/{topic}/records", self.addr)
    }

    pub fn advance_ms(&self, ms: u64) {
        self.clock.as_ref().expect("manual clock").advance_ms(ms);
    }

    /// Stops the gateway as a killed process would: no drain, no goodbyes.
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.stop.take();
    }

    /// Graceful shutdown; returns the run's report.
    pub async fn shutdown(mut self) -> ShutdownReport {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task
            .take()
            .expect("running")
            .await
            .expect("gateway task")
    }
}

/// Runs `command` (a real client the test drives) off the runtime's threads, so the gateway it
/// talks to keeps being served; its standard output. Fails, naming `what` and with what it
/// printed, unless it succeeded.
pub async fn client_output(mut command: std::process::Command, what: &str) -> Vec<u8> {
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("client task")
        .unwrap_or_else(|e| panic!("{what} does not run: {e}"));
    assert!(
        output.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The test certificate and key (for localhost and 127.0.0.1) and the CA that signed them.
pub const TLS_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

/// A TLS client that trusts the fixtures' CA and offers `alpn`.
pub fn tls_connector(alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(format!("{TLS_FIXTURES}/ca.pem")).expect("ca") {
        roots.add(cert.expect("cert")).expect("root");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// POSTs a JSON body with the test key; returns status, headers and the JSON answer.
pub async fn post_json(
    url: &str,
    key: &str,
    body: &serde_json::Value,
) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
    post_raw(url, key, "application/json", body.to_string()).await
}

pub async fn post_raw(
    url: &str,
    key: &str,
    content_type: &str,
    body: impl Into<reqwest::Body>,
) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
    let (status, headers, text) =
        post_text(url, key, &[("content-type", content_type)], body).await;
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("response is not JSON ({e}): {text}"));
    (status, headers, json)
}

/// POSTs `body` with `key` and the given headers; status, headers and the answer as text (or
/// a line saying it could not be read). For answers that are not `/v1`'s JSON: Confluent's shapes,
/// streams' reports, refusals of coded or malformed bodies.
pub async fn post_text(
    url: &str,
    key: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = client().post(url).bearer_auth(key).body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response
        .text()
        .await
        .unwrap_or_else(|e| format!("(the answer could not be read: {e})"));
    (status, headers, text)
}

/// A `/v1` produce with an `Idempotency-Key`: status, whether it was a replay
/// (`Idempotent-Replayed`), and the answer.
pub async fn post_keyed(
    url: &str,
    api_key: &str,
    idempotency_key: &str,
    body: &serde_json::Value,
) -> (u16, bool, serde_json::Value) {
    let r = client()
        .post(url)
        .bearer_auth(api_key)
        .header("idempotency-key", idempotency_key)
        .json(body)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    let replayed = r.headers().contains_key("idempotent-replayed");
    (status, replayed, r.json().await.unwrap_or_default())
}

/// A record as read back from Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub timestamp: Option<i64>,
}

/// Reads every record of `topic` from offset 0 of each partition, stopping once `expected`
/// records have arrived and nothing more comes for `idle` (or at the overall deadline).
pub fn read_back(bootstrap: &str, topic: &str, partitions: i32, expected: usize) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{}", unique_topic("g")))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&assignment).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let idle = Duration::from_millis(1500);
    let mut last = Instant::now();
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                out.push(Consumed {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers: m
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                                .collect()
                        })
                        .unwrap_or_default(),
                    timestamp: m.timestamp().to_millis(),
                });
                last = Instant::now();
            }
            Some(Err(e)) => panic!("consumer error: {e}"),
            None => {
                if out.len() >= expected && last.elapsed() > idle {
                    break;
                }
            }
        }
    }
    out.sort_by_key(|c| (c.partition, c.offset));
    out
}

/// A GET on the admin API with the test gateways' admin token (as most admin calls are made).
pub async fn admin_get(gw: &Gateway, path: &str) -> (u16, Value) {
    admin(gw, Method::GET, path, None, Some(ADMIN_TOKEN)).await
}

/// A PUT of `body` on the admin API with the admin token.
pub async fn admin_put(gw: &Gateway, path: &str, body: Value) -> (u16, Value) {
    admin(gw, Method::PUT, path, Some(body), Some(ADMIN_TOKEN)).await
}

/// A PATCH of `body` on the admin API with the admin token.
pub async fn admin_patch(gw: &Gateway, path: &str, body: Value) -> (u16, Value) {
    admin(gw, Method::PATCH, path, Some(body), Some(ADMIN_TOKEN)).await
}

/// A POST without a body on the admin API (issuing a key) with the admin token.
pub async fn admin_post(gw: &Gateway, path: &str) -> (u16, Value) {
    admin(gw, Method::POST, path, None, Some(ADMIN_TOKEN)).await
}

/// A DELETE on the admin API with the admin token.
pub async fn admin_delete(gw: &Gateway, path: &str) -> (u16, Value) {
    admin(gw, Method::DELETE, path, None, Some(ADMIN_TOKEN)).await
}

/// How many requests `tenant` has had admitted, as the admin API's tenant view counts them.
pub async fn admitted_requests(gw: &Gateway, tenant: &str) -> u64 {
    let (_, body) = admin_get(gw, &format!("/admin/tenants/{tenant}")).await;
    body["live"]["admitted"]["requests"].as_u64().unwrap_or(0)
}

/// Each `offsets[i][field]` (`partition` or `offset`) of a `/v1` answer, which must have them.
pub fn offsets(answer: &Value, field: &str) -> Vec<i64> {
    answer["offsets"]
        .as_array()
        .unwrap_or_else(|| panic!("offsets: {answer}"))
        .iter()
        .map(|o| {
            o[field]
                .as_i64()
                .unwrap_or_else(|| panic!("{field}: {answer}"))
        })
        .collect()
}

/// The `id` of each item of the array `list` in `answer` (an admin listing's tenants, a
/// batch's successes or failures); the answer must have that array.
pub fn listed_ids<'a>(answer: &'a Value, list: &str) -> Vec<&'a str> {
    answer[list]
        .as_array()
        .unwrap_or_else(|| panic!("{list}: {answer}"))
        .iter()
        .filter_map(|v| v["id"].as_str())
        .collect()
}

/// Waits (real time, polling `every`) until something listens on loopback `port`, as a
/// process the test started does once it is up; fails naming `what` after `within`.
pub fn wait_for_port(port: u16, (within, every): (Duration, Duration), what: &str) {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(every);
    }
}

/// An admin call: method, path, optional JSON body, token.
pub async fn admin(
    gw: &Gateway,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
    token: Option<&str>,
) -> (u16, serde_json::Value) {
    let mut request = client().request(method, gw.admin_url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("admin request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let json = if text.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    };
    (status, json)
}
