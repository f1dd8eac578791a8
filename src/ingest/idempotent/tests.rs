//! The key step through the produce router, in process, on librdkafka's mock cluster and a
//! budget clock the tests step: replays byte for byte on every wire format, 422 for another
//! request under a key, 409 while the original is read, what is not stored, TTL expiry, a
//! retry that attaches to records Kafka has not answered.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use tokio::sync::mpsc;
use tower::ServiceExt as _;

use crate::access::AdminTokens;
use crate::app::{AppState, BuildOptions};
use crate::budget::ManualClock;
use crate::config::{Config, TenantConfig};
use crate::idempotency::KeyOutcome;
use crate::ingest::test_body::Chunks;
use crate::kafka::MockCluster;
use crate::outcome::ApiError;

const TOPIC: &str = "test.keys";
const V1: &str = "/v1/topics/test.keys/records";

struct Setup {
    cluster: MockCluster,
    app: Arc<AppState>,
    clock: Arc<ManualClock>,
}

fn setup(edit: impl FnOnce(&mut Config)) -> Setup {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, 2, 1).expect("topic");
    let mut config = Config::from_toml_with_env("", Vec::new()).expect("defaults");
    config.kafka.bootstrap_servers = cluster.bootstrap_servers();
    config.kafka.delivery_timeout_ms = 5_000;
    config.tenants = vec![TenantConfig {
        id: "acme".into(),
        api_key_sha256: vec![crate::identity::ApiKeyHash::of_key("acme-key").to_hex()],
        topics: vec!["test.*".into()],
        ..TenantConfig::default()
    }];
    edit(&mut config);
    let clock = Arc::new(ManualClock::new());
    let tokens = AdminTokens::parse("ops:idempotency-test-token").expect("tokens");
    let app =
        AppState::build(&config, clock.clone(), tokens, BuildOptions::default()).expect("state");
    Setup {
        cluster,
        app: Arc::new(app),
        clock,
    }
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }
}

fn request(path: &str, key: Option<&str>, content_type: &str, body: Body) -> Request<Body> {
    let mut r = Request::post(path)
        .header("authorization", "Bearer acme-key")
        .header("content-type", content_type);
    if let Some(key) = key {
        r = r.header("idempotency-key", key);
    }
    r.body(body).unwrap_or_default()
}

async fn call(s: &Setup, request: Request<Body>) -> Answer {
    let router = crate::http::router(s.app.clone());
    let response = router.oneshot(request).await.unwrap_or_else(|e| match e {});
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    Answer {
        status,
        headers,
        body,
    }
}

async fn post(s: &Setup, path: &str, key: Option<&str>, body: &str) -> Answer {
    let ct = if path.starts_with("/topics/") {
        "application/vnd.kafka.json.v2+json"
    } else {
        "application/json"
    };
    call(s, request(path, key, ct, Body::from(body.to_string()))).await
}

fn records(tag: &str, n: usize) -> String {
    let r: Vec<_> = (0..n)
        .map(|i| serde_json::json!({"value": format!("{tag}-{i}")}))
        .collect();
    serde_json::json!({ "records": r }).to_string()
}

fn admitted(s: &Setup) -> u64 {
    let directory = s.app.ingest.tenants.load();
    directory
        .get("acme")
        .and_then(|t| t.stats_if_any())
        .map_or(0, |stats| stats.admitted_records.load(Relaxed))
}

fn count(s: &Setup, outcome: KeyOutcome) -> u64 {
    s.app.ingest.idempotency.stats.outcome(outcome)
}

/// The same bytes, the same status and content type; the replay says it is one and writes
/// nothing: `/v1` JSON and NDJSON, async, Confluent v2, v3 records:batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_gets_the_original_answer_byte_for_byte_and_writes_nothing() {
    let s = setup(|_| {});
    let v3 = "/v3/clusters/c/topics/test.keys/records:batch";
    let batch = r#"{"entries":[{"id":"a","value":{"type":"JSON","data":1}},{"id":"b","value":{"type":"STRING","data":"x"}}]}"#;
    let cases: Vec<(&str, &str, String)> = vec![
        (V1, "application/json", records("json", 3)),
        (
            V1,
            "application/x-ndjson",
            "{\"value\":1}\n{\"value\":2}\n".into(),
        ),
        (
            "/v1/topics/test.keys/records?async=true",
            "application/json",
            records("async", 2),
        ),
        (
            "/topics/test.keys",
            "application/vnd.kafka.json.v2+json",
            r#"{"records":[{"value":{"a":1}},{"value":2}]}"#.into(),
        ),
        (v3, "application/json", batch.into()),
    ];
    for (i, (path, ct, body)) in cases.into_iter().enumerate() {
        let key = format!("replay-{i}");
        let first = call(&s, request(path, Some(&key), ct, Body::from(body.clone()))).await;
        assert!(first.status.is_success(), "{path}: {}", first.status);
        assert!(!first.replayed(), "the original is not a replay");
        let written = admitted(&s);
        let again = call(&s, request(path, Some(&key), ct, Body::from(body.clone()))).await;
        assert_eq!(again.status, first.status, "{path}");
        assert_eq!(again.body, first.body, "{path}: byte for byte");
        assert_eq!(
            again.headers.get("content-type"),
            first.headers.get("content-type"),
            "{path}"
        );
        assert!(again.replayed(), "{path}: Idempotent-Replayed: true");
        assert_eq!(admitted(&s), written, "{path}: nothing written again");
        // The quoted spelling is the same key.
        let quoted = call(
            &s,
            request(path, Some(&format!("\"{key}\"")), ct, Body::from(body)),
        )
        .await;
        assert_eq!((quoted.status, quoted.body), (first.status, first.body));
    }
    assert_eq!(count(&s, KeyOutcome::Replayed), 10);
    assert_eq!(count(&s, KeyOutcome::Processed), 5);
}

/// Another body, another acknowledgement mode, another topic or content type under the same
/// key: 422, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_for_another_request_is_422() {
    let s = setup(|_| {});
    let first = post(&s, V1, Some("k"), &records("a", 1)).await;
    assert_eq!(first.status, StatusCode::OK);
    let written = admitted(&s);
    for (path, ct, body) in [
        (V1, "application/json", records("b", 1)),
        (
            "/v1/topics/test.keys/records?async=true",
            "application/json",
            records("a", 1),
        ),
        (V1, "application/x-ndjson", records("a", 1)),
        (
            "/v1/topics/test.other/records",
            "application/json",
            records("a", 1),
        ),
    ] {
        let a = call(&s, request(path, Some("k"), ct, Body::from(body))).await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{path} {ct}");
        assert_eq!(a.json()["error"], "idempotency_key_reused");
        assert!(a.json()["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("Idempotency-Key")));
    }
    assert_eq!(admitted(&s), written);
    assert_eq!(count(&s, KeyOutcome::Reused), 4);
    // Keys are per tenant: the key is still free for the original request's replays only.
    let again = post(&s, V1, Some("k"), &records("a", 1)).await;
    assert!(again.replayed());
}

/// While the original is still being read, a second request with its key is 409 with
/// Retry-After, without reading its body; once the original is answered, retries replay it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_while_the_original_is_read_is_409_with_retry_after() {
    let s = setup(|_| {});
    let (tx, rx) = mpsc::channel(4);
    let body = records("slow", 2);
    let (head, tail) = body.split_at(10);
    tx.send(Bytes::copy_from_slice(head.as_bytes()))
        .await
        .expect("send");
    let slow = request(V1, Some("busy"), "application/json", Body::new(Chunks(rx)));
    let app = crate::http::router(s.app.clone());
    let original = tokio::spawn(app.oneshot(slow));
    // The original holds the key once it is claimed.
    while s.app.ingest.idempotency.in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    let second = post(&s, V1, Some("busy"), &body).await;
    assert_eq!(second.status, StatusCode::CONFLICT);
    assert_eq!(second.json()["error"], "idempotency_key_in_use");
    assert_eq!(second.headers["retry-after"], "1");
    assert!(second.json()["detail"]
        .as_str()
        .is_some_and(|d| d.starts_with("Idempotency-Key")));
    tx.send(Bytes::copy_from_slice(tail.as_bytes()))
        .await
        .expect("send");
    drop(tx);
    let first = original.await.expect("task").unwrap_or_else(|e| match e {});
    assert_eq!(first.status(), StatusCode::OK);
    let first = axum::body::to_bytes(first.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let third = post(&s, V1, Some("busy"), &body).await;
    assert_eq!((third.status, third.body), (StatusCode::OK, first));
    assert_eq!(count(&s, KeyOutcome::Conflict), 1);
}

/// Only requests that wrote something have their answer stored. A 429 decided nothing: the
/// key stays free and the retry is processed. A 4xx refused the whole request, wrote nothing
/// and charged nothing (here 400, no records): not stored either, so the retry is decided
/// again, and the same key may carry a corrected request; so is a 404 about the world (the
/// topic may be made). What is stored is counted: nothing for the refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_store_nothing_and_their_retries_are_decided_again() {
    let s = setup(|c| {
        c.tenants[0].records_per_sec = Some(2);
        c.tenants[0].records_burst = Some(2);
    });
    let first = post(&s, V1, Some("r"), &records("a", 2)).await;
    assert_eq!(first.status, StatusCode::OK);
    let refused = post(&s, V1, Some("later"), &records("b", 2)).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    s.clock.advance_ms(1_000);
    let retried = post(&s, V1, Some("later"), &records("b", 2)).await;
    assert_eq!(retried.status, StatusCode::OK, "{:?}", retried.json());
    assert!(!retried.replayed(), "processed, not replayed");
    // A replay is never refused for the budget: it charges nothing.
    let replay = post(&s, V1, Some("r"), &records("a", 2)).await;
    assert_eq!((replay.status, replay.replayed()), (StatusCode::OK, true));
    s.clock.advance_ms(1_000);
    let stored = s.app.ingest.idempotency.memory().expect("memory").held().0;
    let bad = r#"{"records":[]}"#;
    let refused = post(&s, V1, Some("400"), bad).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    let again = post(&s, V1, Some("400"), bad).await;
    assert_eq!(
        (again.status, again.replayed()),
        (StatusCode::BAD_REQUEST, false),
        "decided again, not replayed"
    );
    assert_eq!(again.body, refused.body, "the same way");
    assert_eq!(
        s.app.ingest.idempotency.memory().expect("memory").held().0,
        stored,
        "no answer stored for a refusal"
    );
    // The corrected request under the same key is processed (nothing was written before).
    let fixed = post(&s, V1, Some("400"), &records("d", 1)).await;
    assert_eq!((fixed.status, fixed.replayed()), (StatusCode::OK, false));
    let missing = "/v1/topics/test.missing/records";
    let gone = post(&s, missing, Some("404"), &records("c", 1)).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    let again = post(&s, missing, Some("404"), &records("c", 1)).await;
    assert_eq!(
        (again.status, again.replayed()),
        (StatusCode::NOT_FOUND, false),
        "processed again, not replayed"
    );
}

/// An answer is replayed for `ttl_s` from when it was stored, then the key is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_kept_for_its_ttl_then_the_key_is_processed_again() {
    let s = setup(|c| c.idempotency.ttl_s = 60);
    let first = post(&s, V1, Some("t"), &records("a", 1)).await;
    s.clock.advance_ms(59_999);
    let kept = post(&s, V1, Some("t"), &records("a", 1)).await;
    assert_eq!((kept.replayed(), &kept.body), (true, &first.body));
    s.clock.advance_ms(1);
    let fresh = post(&s, V1, Some("t"), &records("a", 1)).await;
    assert_eq!(fresh.status, StatusCode::OK);
    assert!(!fresh.replayed(), "expired: processed again");
    assert_ne!(fresh.body, first.body, "new offsets");
    let memory = s.app.ingest.idempotency.memory().expect("memory store");
    assert_eq!(memory.counts.expirations.load(Relaxed), 1);
}

/// Kafka away: the original gets 503 after the delivery timeout, and so does a retry that
/// attaches to its records (writing nothing); once Kafka is back, a retry gets the records'
/// real outcome, and they are in Kafka once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_attaches_to_records_kafka_has_not_answered() {
    let s = setup(|c| c.kafka.delivery_timeout_ms = 300);
    let warm = post(&s, V1, None, &records("warm", 1)).await;
    assert_eq!(warm.status, StatusCode::OK);
    s.cluster.broker_down(1).expect("down");
    let first = post(&s, V1, Some("p"), &records("p", 3)).await;
    assert_eq!(first.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(first.json()["error"], "kafka_unavailable");
    let attached = post(&s, V1, Some("p"), &records("p", 3)).await;
    assert_eq!(attached.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(attached.json()["detail"]
        .as_str()
        .is_some_and(|d| d.contains("nothing was written again")));
    let written = admitted(&s);
    s.cluster.broker_up(1).expect("up");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let answered = loop {
        let a = post(&s, V1, Some("p"), &records("p", 3)).await;
        if a.status == StatusCode::OK {
            break a;
        }
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(std::time::Instant::now() < deadline, "Kafka never answered");
    };
    assert!(answered.replayed());
    assert_eq!(answered.json()["offsets"].as_array().map(Vec::len), Some(3));
    assert_eq!(admitted(&s), written, "no retry wrote anything");
    assert!(count(&s, KeyOutcome::Attached) >= 2);
}

/// A bad key is 400 naming the header; a stream refuses the header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_and_keys_on_streams_are_400() {
    let s = setup(|_| {});
    let long = "k".repeat(256);
    for bad in ["", "a b", long.as_str(), "\"open"] {
        let a = post(&s, V1, Some(bad), &records("a", 1)).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(a.json()["error"], "invalid_idempotency_key");
        assert!(a.json()["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("Idempotency-Key")));
    }
    let stream = call(
        &s,
        request(
            "/v3/clusters/c/topics/test.keys/records",
            Some("s"),
            "application/json",
            Body::from(r#"{"value":{"type":"JSON","data":1}}"#),
        ),
    )
    .await;
    assert_eq!(stream.status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&stream.body).contains("Idempotency-Key"));
    assert_eq!(admitted(&s), 0);
}

/// R-3 of review 30 of #37: a `schema_busy` the tenant's own work caused spends its allowance
/// of releases; one the schema threads gave while busy with other tenants' work does not.
#[test]
fn a_schema_busy_of_others_work_does_not_spend_the_allowance_of_releases() {
    let wait = Duration::from_secs(2);
    assert!(super::counted(&ApiError::SchemaBusy(wait, "own".into())));
    assert!(!super::counted(&ApiError::SchemaCrowded(
        wait,
        "others".into()
    )));
}
