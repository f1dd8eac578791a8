//! `Idempotency-Key` across replicas sharing a real Redis (on librdkafka's mock cluster for
//! Kafka): a key another replica is reading is 409, one used for another request 422, one
//! whose records are pending on another replica is waited on and its answer replayed; a Redis
//! that is away refuses (503) or accepts without de-duplication, as configured; the metrics
//! count what happened and pass `promtool check metrics`.

use std::time::{Duration, Instant};

use crate::common::exposition::{sample, scrape};
use crate::common::*;
use floodgate::cluster::RedisIdempotencyStore;
use floodgate::config::{Config, OnStoreError};
use floodgate::idempotency::{Fingerprint, Found, KeyDigest, TenantKey, Token};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOPIC: &str = "test.keys";

fn replica(bootstrap: &str, redis: &str, prefix: &str, id: &str) -> Config {
    let mut cfg = config(bootstrap);
    cfg.kafka.delivery_timeout_ms = 800;
    cfg.cluster.redis_url = Some(redis.to_string());
    cfg.cluster.key_prefix = prefix.to_string();
    cfg.cluster.replica_id = Some(id.to_string());
    // Renewed every 250 ms: another replica sees a pending request that soon.
    cfg.idempotency.claim_ttl_ms = 1_000;
    cfg
}

fn records(tag: &str, n: usize) -> String {
    let r: Vec<_> = (0..n)
        .map(|i| serde_json::json!({"value": format!("{tag}-{i}")}))
        .collect();
    serde_json::json!({ "records": r }).to_string()
}

struct Answer {
    status: u16,
    replayed: bool,
    body: String,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }
}

async fn keyed(gw: &Gateway, key: &str, body: &str) -> Answer {
    let r = client()
        .post(gw.url(TOPIC))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    let replayed = r.headers().contains_key("idempotent-replayed");
    Answer {
        status,
        replayed,
        body: r.text().await.expect("body"),
    }
}

/// One request without a key until it is delivered: the producer is connected before the
/// test's short delivery timeout counts.
async fn warm(gw: &Gateway) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, _, _) = post_json(
            &gw.url(TOPIC),
            KEY,
            &serde_json::json!({"records":[{"value":0}]}),
        )
        .await;
        if s == 200 {
            return;
        }
        assert!(Instant::now() < deadline, "the gateway never delivered");
    }
}

fn outcome(text: &str, name: &str) -> f64 {
    sample(
        text,
        &format!("floodgate_idempotency_requests_total{{outcome=\"{name}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_replicas_a_key_in_use_is_409_a_reused_one_422_a_pending_one_waited_on() {
    let kafka = mock_cluster(&[TOPIC]);
    let (redis, p) = (redis_url(), redis_prefix("keys-across"));
    let a = Gateway::start(replica(&kafka.bootstrap_servers(), &redis, &p, "a")).await;
    let b = Gateway::start(replica(&kafka.bootstrap_servers(), &redis, &p, "b")).await;
    warm(&a).await;
    warm(&b).await;
    let admitted = "floodgate_tenant_records_total{tenant=\"acme\",outcome=\"admitted\"}";
    let written_by_b = sample(&scrape(&b).await, admitted);

    // 409: a request with the key is still being read on replica a.
    let body = records("slow", 2);
    let mut slow = tokio::net::TcpStream::connect(a.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /v1/topics/{TOPIC}/records HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nIdempotency-Key: slow\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.expect("head");
    slow.write_all(&body.as_bytes()[..5]).await.expect("part");
    // Replica a holds the key once it has read the request's head.
    let deadline = Instant::now() + Duration::from_secs(5);
    while sample(&scrape(&a).await, "floodgate_idempotency_in_flight") < 1.0 {
        assert!(Instant::now() < deadline, "replica a never claimed the key");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let conflict = keyed(&b, "slow", &body).await;
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    assert_eq!(conflict.json()["error"], "idempotency_key_in_use");
    slow.write_all(&body.as_bytes()[5..]).await.expect("rest");
    let mut original = String::new();
    slow.read_to_string(&mut original).await.expect("answer");
    assert!(original.starts_with("HTTP/1.1 200"), "{original}");
    let original_body = original.split("\r\n\r\n").nth(1).unwrap_or_default();
    let replay = keyed(&b, "slow", &body).await;
    assert_eq!((replay.status, replay.replayed), (200, true));
    assert_eq!(
        replay.body, original_body,
        "byte for byte, from another replica"
    );

    // 422: the same key for another request, on another replica.
    let reused = keyed(&a, "slow", &records("other", 2)).await;
    assert_eq!(reused.status, 422);
    assert_eq!(reused.json()["error"], "idempotency_key_reused");

    // Pending: Kafka away, the original on a gets 503; a retry on b waits for it (and gets
    // 503 too, writing nothing); once Kafka is back, a retry on b gets the original's answer.
    kafka.broker_down(1).expect("down");
    let first = keyed(&a, "pending", &records("p", 3)).await;
    assert_eq!(first.status, 503, "{}", first.body);
    let waited = keyed(&b, "pending", &records("p", 3)).await;
    assert_eq!(waited.status, 503, "{}", waited.body);
    assert!(
        waited.body.contains("on another replica"),
        "waited on a's pending records: {}",
        waited.body
    );
    kafka.broker_up(1).expect("up");
    let deadline = Instant::now() + Duration::from_secs(20);
    let answered = loop {
        let answer = keyed(&b, "pending", &records("p", 3)).await;
        if answer.status == 200 {
            break answer;
        }
        assert!(Instant::now() < deadline, "never answered: {}", answer.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(answered.replayed);
    assert_eq!(answered.json()["offsets"].as_array().map(Vec::len), Some(3));
    let on_b = scrape(&b).await;
    assert_eq!(
        sample(&on_b, admitted),
        written_by_b,
        "replica b wrote nothing but its warm-up"
    );
    assert!(outcome(&on_b, "attached") >= 1.0);
    assert_eq!(outcome(&on_b, "conflict"), 1.0);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_is_away_refuses_keyed_requests_or_accepts_them_unprotected() {
    let kafka = mock_cluster(&[TOPIC]);
    let mut redis = OwnRedis::start();
    let p = redis_prefix("keys-away");
    let refuse = Gateway::start(replica(&kafka.bootstrap_servers(), &redis.url(), &p, "r")).await;
    let mut cfg = replica(&kafka.bootstrap_servers(), &redis.url(), &p, "s");
    cfg.idempotency.on_store_error = OnStoreError::Accept;
    let accept = Gateway::start(cfg).await;
    warm(&refuse).await;
    warm(&accept).await;
    let first = keyed(&refuse, "k1", &records("a", 1)).await;
    assert_eq!(first.status, 200, "{}", first.body);
    redis.kill();
    let refused = keyed(&refuse, "k2", &records("b", 1)).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["error"], "idempotency_unavailable");
    assert!(refused.json()["detail"]
        .as_str()
        .is_some_and(|d| d.starts_with("Idempotency-Key")));
    let accepted = keyed(&accept, "k2", &records("b", 1)).await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    // Requests without a key are not affected by the key store.
    let (s, _, _) = post_json(
        &refuse.url(TOPIC),
        KEY,
        &serde_json::json!({"records":[{"value":1}]}),
    )
    .await;
    assert_eq!(s, 200);
    let on_refuse = scrape(&refuse).await;
    let on_accept = scrape(&accept).await;
    assert_eq!(outcome(&on_refuse, "refused"), 1.0);
    assert_eq!(outcome(&on_accept, "unprotected"), 1.0);
    assert!(
        sample(
            &on_refuse,
            "floodgate_idempotency_store_errors_total{op=\"claim\"}"
        ) >= 1.0
    );
    // Redis back: keys are claimed again (the connection manager reconnects by itself).
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = keyed(&refuse, "k3", &records("c", 1)).await;
        if answer.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never recovered: {}",
            answer.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(keyed(&accept, "k3", &records("c", 1)).await.replayed);
    refuse.shutdown().await;
    accept.shutdown().await;
}

/// `redis-cli` against the test's own Redis; returns once Redis has answered.
async fn redis_cli(redis: &OwnRedis, args: &[&str]) -> String {
    let port = redis.port.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &port])
            .args(&args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    })
    .await
    .expect("redis-cli task")
}

/// A claim that timed out in a paused Redis still runs once Redis goes on: it is given up
/// behind it, so the retry after the pause is processed instead of answered 409 until the
/// claim lapses (claim_ttl_ms, here longer than the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_timed_out_in_a_paused_redis_does_not_hold_its_key() {
    let kafka = mock_cluster(&[TOPIC]);
    let redis = OwnRedis::start();
    let p = redis_prefix("keys-paused");
    let mut cfg = replica(&kafka.bootstrap_servers(), &redis.url(), &p, "r");
    cfg.idempotency.claim_ttl_ms = 60_000;
    let gw = Gateway::start(cfg).await;
    warm(&gw).await;
    // Redis has both scripts (a paused Redis that did not know them would refuse them later).
    let first = keyed(&gw, "k0", &records("z", 1)).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        redis_cli(&redis, &["CLIENT", "PAUSE", "1500", "ALL"]).await,
        "OK"
    );
    let refused = keyed(&gw, "k1", &records("a", 1)).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["error"], "idempotency_unavailable");
    // A paused Redis holds every client's commands: this answers once the pause is over, after
    // what the gateway sent during it.
    assert_eq!(redis_cli(&redis, &["PING"]).await, "PONG");
    let retry = keyed(&gw, "k1", &records("a", 1)).await;
    assert_eq!(
        retry.status, 200,
        "the timed-out claim held the key: {}",
        retry.body
    );
    assert!(!retry.replayed, "nothing was written the first time");
    let again = keyed(&gw, "k1", &records("a", 1)).await;
    assert!(again.replayed && again.body == retry.body, "{}", again.body);
    gw.shutdown().await;
}

/// The series count what happened, and a scrape passes promtool's lint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_series_count_outcomes_and_pass_promtool() {
    let (_kafka, gw) = gateway_on_mock(TOPIC, Time::Real, |c| {
        c.idempotency.max_entries = 2;
    })
    .await;
    for key in ["m1", "m2", "m3"] {
        assert_eq!(keyed(&gw, key, &records(key, 1)).await.status, 200);
    }
    assert!(keyed(&gw, "m3", &records("m3", 1)).await.replayed);
    assert_eq!(keyed(&gw, "m3", &records("x", 1)).await.status, 422);
    let text = scrape(&gw).await;
    assert_eq!(outcome(&text, "processed"), 3.0);
    assert_eq!(outcome(&text, "replayed"), 1.0);
    assert_eq!(outcome(&text, "reused"), 1.0);
    assert_eq!(sample(&text, "floodgate_idempotency_evictions_total"), 1.0);
    assert_eq!(
        sample(&text, "floodgate_idempotency_entries{of=\"held\"}"),
        2.0
    );
    assert_eq!(
        sample(&text, "floodgate_idempotency_entries{of=\"max\"}"),
        2.0
    );
    // An evicted key is processed again: its guarantee ended with its eviction.
    let again = keyed(&gw, "m1", &records("m1", 1)).await;
    assert_eq!((again.status, again.replayed), (200, false));
    if let Err(problems) = crate::common::exposition::promtool_check(&text) {
        panic!("promtool: {problems}");
    }
    gw.shutdown().await;
}

/// The shared idempotency store on the shared Redis, under a key prefix of `test`'s own,
/// connected: how the tests of its scripts on their own start.
async fn connected_keys(test: &str) -> RedisIdempotencyStore {
    let keys = RedisIdempotencyStore::new(
        &redis_url(),
        &redis_prefix(test),
        (Duration::from_secs(2), Duration::from_secs(2)),
        100,
    )
    .expect("client");
    keys.connect().await.expect("Redis");
    keys
}

/// Acme's idempotency key whose digest is `digest` repeated.
fn acme_key(digest: u8) -> TenantKey {
    TenantKey {
        tenant: floodgate::identity::TenantId::new("acme"),
        digest: KeyDigest([digest; 32]),
    }
}

/// The tokens of two requests in those tests.
const FIRST: Token = Token(*b"0123456789abcdef0123456789abcdef");
const SECOND: Token = Token(*b"fedcba9876543210fedcba9876543210");

/// How long a claim lives in those tests: longer than any of them.
const CLAIM_TTL: Duration = Duration::from_secs(60);

/// A renewal sent before a release but run after it (the renewer read its claims, then the
/// request gave its key up) leaves the key given up: it used to take the key again, so
/// every retry was 409 until the claim lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_runs_after_its_release_does_not_take_the_key_again() {
    let (ttl, first, second) = (CLAIM_TTL, FIRST, SECOND);
    let keys = connected_keys("keys-stale-renewal").await;
    for (i, pending) in [None, Some(Fingerprint([7; 32]))].into_iter().enumerate() {
        let key = acme_key(i as u8);
        assert_eq!(keys.claim(&key, &first, ttl).await.expect("claim"), None);
        if let Some(fp) = pending {
            assert!(keys
                .renew(&key, &first, Some(fp), ttl)
                .await
                .expect("pending"));
        }
        assert!(keys.release(&key, &first, ttl).await.expect("release"));
        // The stale renewal: harmless, and the key stays free.
        keys.renew(&key, &first, pending, ttl)
            .await
            .expect("renewal");
        assert_eq!(keys.read(&key).await.expect("read"), None, "{pending:?}");
        // The next request takes it; the old holder's renewals leave it alone.
        assert_eq!(keys.claim(&key, &second, ttl).await.expect("claim"), None);
        assert!(!keys
            .renew(&key, &first, pending, ttl)
            .await
            .expect("renewal"));
        assert_eq!(
            keys.read(&key).await.expect("read"),
            Some(Found::Claimed(second))
        );
    }
}

/// A holder whose claim lapsed while Redis was paused, and whose key another request claimed
/// and gave up behind the pause, takes the key back with its next renewal: its records may
/// still be written, so a retry must find them pending, not a free key to write again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_holder_takes_back_a_key_another_request_gave_up() {
    let (ttl, holder, other) = (CLAIM_TTL, FIRST, SECOND);
    let keys = connected_keys("keys-lapsed-holder").await;
    let key = acme_key(42);
    let fp = Fingerprint([9; 32]);
    assert_eq!(keys.claim(&key, &holder, ttl).await.expect("claim"), None);
    assert!(keys
        .renew(&key, &holder, Some(fp), ttl)
        .await
        .expect("pending"));
    // The claim lapses (as a pause longer than its lifetime makes it).
    let client = redis::Client::open(redis_url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis");
    let _: i64 = redis::cmd("DEL")
        .arg(keys.redis_key(&key))
        .query_async(&mut conn)
        .await
        .expect("DEL");
    // Behind the pause: another request claims the free key and gives it up.
    assert_eq!(keys.claim(&key, &other, ttl).await.expect("claim"), None);
    assert!(keys.release(&key, &other, ttl).await.expect("release"));
    // The holder's renewal takes it back, pending with its records.
    assert!(keys
        .renew(&key, &holder, Some(fp), ttl)
        .await
        .expect("renewal"));
    assert_eq!(
        keys.read(&key).await.expect("read"),
        Some(Found::Pending(holder, fp))
    );
    // A key another request holds (not gave up) is still left alone.
    let key2 = acme_key(43);
    assert_eq!(keys.claim(&key2, &other, ttl).await.expect("claim"), None);
    assert!(!keys
        .renew(&key2, &holder, Some(fp), ttl)
        .await
        .expect("renewal"));
    assert_eq!(
        keys.read(&key2).await.expect("read"),
        Some(Found::Claimed(other))
    );
}
