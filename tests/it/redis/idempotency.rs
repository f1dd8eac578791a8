//! `Idempotency-Key` against real parts: clients send keyed sync and async requests through a
//! TCP proxy that loses some answers (the gateway processed the request, the client heard
//! nothing) and cuts some requests short, and retry with the same key until they get an
//! answer; meanwhile the broker (a Tansu of the test's own) is stalled with SIGSTOP long
//! enough for sync requests to get 503. In cluster mode three replicas share a real Redis,
//! every retry goes to another replica than the try before, and one replica is restarted
//! mid-run. At the end every client has an answer for every request and every record is in
//! Kafka exactly once, counted by unique value.
//!
//! Without the key step the lost answers' retries would write their records again, so the
//! exactly-once count fails.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::faults::{Fate, OwnTansu, Proxy};
use crate::common::*;
use floodgate::config::Config;
use serde_json::json;

const CLIENTS: usize = 6;
const REQUESTS: usize = 24;
const RECORDS: usize = 3;
const PARTITIONS: i32 = 3;

/// Every third connection loses its answer, every seventh is cut short.
fn fate(n: u64) -> Fate {
    if n % 3 == 0 {
        Fate::LoseAnswer
    } else if n % 7 == 0 {
        Fate::CutEarly
    } else {
        Fate::Forward
    }
}

/// What the clients saw.
#[derive(Default)]
struct Seen {
    attempts: AtomicU64,
    connection_errors: AtomicU64,
    unavailable: AtomicU64,
    conflicts: AtomicU64,
    replayed: AtomicU64,
    answered: AtomicU64,
}

fn value(client: usize, request: usize, record: usize) -> String {
    format!("c{client}-r{request}-{record}")
}

fn body(client: usize, request: usize) -> serde_json::Value {
    let records: Vec<_> = (0..RECORDS)
        .map(|k| json!({"value": value(client, request, k)}))
        .collect();
    json!({ "records": records })
}

/// One client: each request with its own key, sync and async in turn, retried with the same
/// key until it is answered 200 or 202 — the next try through the next proxy (in cluster
/// mode: the next replica).
async fn run_client(
    id: usize,
    proxies: Arc<Vec<std::net::SocketAddr>>,
    topic: String,
    seen: Arc<Seen>,
) {
    // A fresh connection per try: a lost answer loses nothing else.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    for request in 0..REQUESTS {
        // Paced, so the run spans the faults.
        tokio::time::sleep(Duration::from_millis(80)).await;
        let sync = request % 2 == 0;
        let key = format!("client-{id}-request-{request}");
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut attempt = id + request;
        loop {
            assert!(Instant::now() < deadline, "{key} never answered");
            attempt += 1;
            seen.attempts.fetch_add(1, Relaxed);
            let proxy = proxies[attempt % proxies.len()];
            let query = if sync { "" } else { "?async=true" };
            let url = format!("http://{proxy}/v1/topics/{topic}/records{query}");
            let sent = http
                .post(&url)
                .bearer_auth(KEY)
                .header("idempotency-key", &key)
                .json(&body(id, request))
                .send()
                .await;
            let response = match sent {
                Ok(r) => r,
                Err(_) => {
                    seen.connection_errors.fetch_add(1, Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let status = response.status().as_u16();
            let replayed = response.headers().contains_key("idempotent-replayed");
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            let Ok(text) = response.text().await else {
                seen.connection_errors.fetch_add(1, Relaxed);
                continue;
            };
            let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            match status {
                200 => {
                    assert!(sync, "{key}: {text}");
                    assert_eq!(
                        answer["offsets"].as_array().map(Vec::len),
                        Some(RECORDS),
                        "{text}"
                    );
                }
                202 => {
                    assert!(!sync, "{key}: {text}");
                    assert_eq!(answer["accepted"], RECORDS, "{text}");
                }
                503 => {
                    seen.unavailable.fetch_add(1, Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                409 => {
                    assert_eq!(answer["error"], "idempotency_key_in_use", "{text}");
                    seen.conflicts.fetch_add(1, Relaxed);
                    let wait = retry_after.unwrap_or(1).min(2);
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                    continue;
                }
                other => panic!("{key}: unexpected {other}: {text}"),
            }
            if replayed {
                seen.replayed.fetch_add(1, Relaxed);
            }
            seen.answered.fetch_add(1, Relaxed);
            break;
        }
    }
}

/// Every record of every client in the topic exactly once, and nothing else.
async fn assert_exactly_once(bootstrap: &str, topic: &str) {
    let expected = CLIENTS * REQUESTS * RECORDS;
    let (b, t) = (bootstrap.to_string(), topic.to_string());
    let read = tokio::task::spawn_blocking(move || read_back(&b, &t, PARTITIONS, expected))
        .await
        .expect("reader");
    let mut counts: HashMap<String, usize> = HashMap::new();
    for r in &read {
        let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
        *counts.entry(v.trim_matches('"').to_string()).or_insert(0) += 1;
    }
    let mut missing = Vec::new();
    let mut twice = Vec::new();
    for c in 0..CLIENTS {
        for r in 0..REQUESTS {
            for k in 0..RECORDS {
                let v = value(c, r, k);
                match counts.get(&v) {
                    None => missing.push(v),
                    Some(1) => {}
                    Some(n) => twice.push(format!("{v} x{n}")),
                }
            }
        }
    }
    assert!(missing.is_empty(), "missing from Kafka: {missing:?}");
    assert!(twice.is_empty(), "written more than once: {twice:?}");
    assert_eq!(read.len(), expected, "nothing else in the topic");
}

/// Runs the clients; `during` is the fault schedule, run beside them.
async fn run_clients(
    proxies: Vec<std::net::SocketAddr>,
    topic: &str,
    during: impl std::future::Future<Output = ()>,
) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let proxies = Arc::new(proxies);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            tokio::spawn(run_client(
                id,
                proxies.clone(),
                topic.to_string(),
                seen.clone(),
            ))
        })
        .collect();
    during.await;
    for c in clients {
        c.await.expect("client");
    }
    seen
}

fn keyed_config(bootstrap: &str) -> Config {
    let mut cfg = config(bootstrap);
    // Short enough for the stall to produce 503s, long enough for a healthy broker.
    cfg.kafka.delivery_timeout_ms = 1_500;
    cfg.server.shutdown_timeout_ms = 15_000;
    cfg
}

fn report(seen: &Seen, proxies: &[Proxy]) -> String {
    format!(
        "attempts {}, answered {}, replayed {}, 503 {}, 409 {}, connection errors {}, answers lost {}, requests cut {}, gateway unreachable {}",
        seen.attempts.load(Relaxed),
        seen.answered.load(Relaxed),
        seen.replayed.load(Relaxed),
        seen.unavailable.load(Relaxed),
        seen.conflicts.load(Relaxed),
        seen.connection_errors.load(Relaxed),
        proxies.iter().map(|p| p.lost.load(Relaxed)).sum::<u64>(),
        proxies.iter().map(|p| p.cut.load(Relaxed)).sum::<u64>(),
        proxies
            .iter()
            .map(|p| p.unreachable.load(Relaxed))
            .sum::<u64>(),
    )
}

/// The faults were there: answers lost, requests cut, 503s from the stall, replays.
fn assert_faults_happened(seen: &Seen, proxies: &[Proxy]) {
    let lost: u64 = proxies.iter().map(|p| p.lost.load(Relaxed)).sum();
    let cut: u64 = proxies.iter().map(|p| p.cut.load(Relaxed)).sum();
    assert!(lost >= 10, "answers lost: {lost}");
    assert!(cut >= 3, "requests cut: {cut}");
    assert!(seen.unavailable.load(Relaxed) > 0, "the stall gave 503s");
    assert!(seen.replayed.load(Relaxed) > 0, "some retries were replays");
    assert_eq!(
        seen.answered.load(Relaxed),
        (CLIENTS * REQUESTS) as u64,
        "every request was answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_replica_retries_through_lost_answers_and_a_stalled_broker_write_once() {
    let tansu = OwnTansu::start();
    let topic = unique_topic("test.keys");
    create_topic(&tansu.bootstrap(), &topic, PARTITIONS).await;
    let gw = Gateway::start(keyed_config(&tansu.bootstrap())).await;
    let proxies = vec![Proxy::start(gw.addr, fate).await];
    let addrs = proxies.iter().map(|p| p.addr).collect();
    let seen = run_clients(addrs, &topic, async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        tansu.stall();
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        tansu.resume();
    })
    .await;
    let scrape = crate::common::exposition::scrape(&gw).await;
    assert_eq!(gw.shutdown().await.unconfirmed_records, 0);
    eprintln!("single replica: {}", report(&seen, &proxies));
    assert_faults_happened(&seen, &proxies);
    assert!(scrape.contains("floodgate_idempotency_requests_total{outcome=\"replayed\"}"));
    assert_exactly_once(&tansu.bootstrap(), &topic).await;
}

fn replica_config(bootstrap: &str, redis: &str, prefix: &str, i: usize) -> Config {
    let mut cfg = keyed_config(bootstrap);
    cfg.cluster.redis_url = Some(redis.to_string());
    cfg.cluster.key_prefix = prefix.to_string();
    cfg.cluster.replica_id = Some(format!("replica-{i}"));
    cfg.cluster.expected_replicas = 3;
    // A restarted replica's claims lapse quickly in the worst case; renewals are every 1 s.
    cfg.idempotency.claim_ttl_ms = 4_000;
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_with_retries_elsewhere_and_a_restart_write_once() {
    let tansu = OwnTansu::start();
    let topic = unique_topic("test.keys");
    create_topic(&tansu.bootstrap(), &topic, PARTITIONS).await;
    let redis = redis_url();
    let prefix = format!("fgtest-keys-{}", std::process::id());
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(Gateway::start(replica_config(&tansu.bootstrap(), &redis, &prefix, i)).await);
    }
    let mut proxies = Vec::new();
    for r in &replicas {
        proxies.push(Proxy::start(r.addr, fate).await);
    }
    let addrs = proxies.iter().map(|p| p.addr).collect();
    let restarted = Arc::new(tokio::sync::Mutex::new(None));
    let keep = restarted.clone();
    let restart_one = replicas.remove(1);
    let seen = run_clients(addrs, &topic, async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        tansu.stall();
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        tansu.resume();
        // Replica 1 goes down gracefully mid-run and comes back with the same id on a new
        // port; retries meanwhile fail to connect to it and go on to the next replica.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let report = restart_one.shutdown().await;
        assert_eq!(report.unconfirmed_records, 0);
        // Down for a moment: tries sent to it meanwhile find nobody and go on elsewhere.
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let again = Gateway::start(replica_config(&tansu.bootstrap(), &redis, &prefix, 1)).await;
        proxies[1].retarget(again.addr);
        *keep.lock().await = Some(again);
    })
    .await;
    eprintln!("three replicas: {}", report(&seen, &proxies));
    assert_faults_happened(&seen, &proxies);
    let unreachable = proxies[1].unreachable.load(Relaxed);
    assert!(
        unreachable > 0,
        "tries reached the restarting replica while it was down"
    );
    let again = restarted.lock().await.take().expect("restarted");
    assert_eq!(again.shutdown().await.unconfirmed_records, 0);
    for r in replicas {
        assert_eq!(r.shutdown().await.unconfirmed_records, 0);
    }
    assert_exactly_once(&tansu.bootstrap(), &topic).await;
}
