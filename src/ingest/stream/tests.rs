//! The stream path in process, on librdkafka's mock cluster and a stepped budget clock: what
//! a stream holds of the body budget, what it counts as demand, how it ends. (Over sockets, with
//! the connection loop and the admin API, in `tests/it/mock/streams.rs`.)

use axum::http::header;

use super::*;
use crate::access::AdminTokens;
use crate::app::{AppState, BuildOptions};
use crate::budget::ManualClock;
use crate::budget::{Dimension, Scope};
use crate::config::{Config, Priority, TenantConfig};
use crate::http::confluent::record::{V3Record, V3Types};
use crate::inflight_bodies::InflightBodies;
use crate::ingest::test_body::Chunks;
use crate::kafka::MockCluster;
use crate::refusal::Reason;

const TOPIC: &str = "test.stream";

fn tenant(id: &str, key: &str) -> TenantConfig {
    TenantConfig {
        id: id.into(),
        api_key_sha256: vec![crate::identity::ApiKeyHash::of_key(key).to_hex()],
        topics: vec!["test.*".into()],
        max_buffer_share: Some(1.0),
        ..TenantConfig::default()
    }
}

struct Setup {
    _cluster: MockCluster,
    app: Arc<AppState>,
    clock: Arc<ManualClock>,
}

fn setup(edit: impl FnOnce(&mut Config)) -> Setup {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, 1, 1).expect("topic");
    let mut config = Config::from_toml_with_env("", Vec::new()).expect("defaults");
    config.kafka.bootstrap_servers = cluster.bootstrap_servers();
    config.tenants = vec![tenant("acme", "acme-key")];
    config.compat.stream_idle_timeout_ms = 2_000;
    edit(&mut config);
    let clock = Arc::new(ManualClock::new());
    let tokens = AdminTokens::parse("ops:stream-test-token").expect("tokens");
    let app =
        AppState::build(&config, clock.clone(), tokens, BuildOptions::default()).expect("state");
    Setup {
        _cluster: cluster,
        app: Arc::new(app),
        clock,
    }
}

fn headers(key: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let auth = format!("Bearer {key}").parse().expect("header value");
    headers.insert(header::AUTHORIZATION, auth);
    headers.insert(
        header::CONTENT_TYPE,
        "application/json".parse().expect("header value"),
    );
    headers
}

/// Opens a stream for `key` whose body the returned sender feeds, starting with `first`.
async fn open(
    app: &AppState,
    key: &str,
    first: &[u8],
) -> (mpsc::Sender<Bytes>, Result<Reports<V3Types>, ApiError>) {
    let (tx, rx) = mpsc::channel(64);
    tx.send(Bytes::copy_from_slice(first)).await.expect("send");
    let headers = headers(key);
    let request = StreamRequest {
        api: Api::V3,
        peer: Default::default(),
        headers: &headers,
        topic: TOPIC,
        body: Body::new(Chunks(rx)),
    };
    let (_, opened) = app
        .ingest
        .open_stream(request, Ok(V3Record::default()))
        .await;
    (tx, opened)
}

/// Each report's code: 200 for a written record, else the refusal's HTTP status.
async fn codes(mut reports: Reports<V3Types>) -> Vec<u16> {
    let mut codes = Vec::new();
    while let Some(report) = reports.next().await {
        codes.push(match report.said() {
            Said::Record { outcome, .. } => match outcome {
                Some(Ok(_)) => 200,
                _ => 502,
            },
            Said::Refused { error, .. } | Said::Ended(error) => error.status().as_u16(),
        });
    }
    codes
}

/// Everything the stream held is back. The last report reaches the reader before the pump
/// task has dropped its share of the stream's memory, so the hold is given back moments after
/// the reports end, not at once; a leak keeps it held and fails here.
async fn all_given_back(budget: &InflightBodies) {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while budget.held() > 0 {
        assert!(std::time::Instant::now() < until, "held {}", budget.held());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A `/v1` request of `n` records from the tenant of `key`, acknowledged when enqueued.
async fn post_v1(app: &AppState, key: &str, n: usize) -> axum::http::StatusCode {
    let body = serde_json::json!({"records": (0..n).map(|i| serde_json::json!({"value": i})).collect::<Vec<_>>()});
    let headers = headers(key);
    let request = crate::ingest::ProduceRequest {
        api: Api::V1,
        peer: Default::default(),
        headers: &headers,
        path: "/v1/topics/test.stream/records",
        topic: TOPIC,
        ack: crate::ingest::Ack::Enqueued,
        body: Body::from(body.to_string()),
        respond: &crate::ingest::OwnShapes,
    };
    let format = crate::ingest::BodyFormat {
        framing: Framing::Envelope("records"),
        record: &crate::http::v1::V1Record,
        max_records: None,
        schemas: None,
    };
    app.ingest.produce(request, Ok(format)).await.status()
}

fn records(n: usize) -> Vec<u8> {
    let one = br#"{"value":{"type":"JSON","data":1}}"#;
    one.iter().copied().cycle().take(one.len() * n).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_over_a_tenants_own_budget_are_not_demand_and_leave_the_adaptive_share_to_others() {
    let s = setup(|c| {
        c.global.records_per_sec = Some(1000);
        c.global.records_burst = Some(1000);
        c.adaptive.enabled = true;
        let mut critical = tenant("crit", "crit-key");
        critical.priority = Some(Priority::Critical);
        critical.records_per_sec = Some(20);
        critical.records_burst = Some(20);
        let mut standard = tenant("std", "std-key");
        standard.priority = Some(Priority::Standard);
        c.tenants = vec![critical, standard];
    });
    let app = &s.app;
    app.adaptive.tick();
    // The critical tenant sends 15 records, then 50 requests of 10 against the 5 it has left:
    // each passes the check before its body (one record) and is refused whole after it.
    assert_eq!(
        post_v1(app, "crit-key", 15).await,
        axum::http::StatusCode::ACCEPTED
    );
    for _ in 0..50 {
        assert_eq!(
            post_v1(app, "crit-key", 10).await,
            axum::http::StatusCode::TOO_MANY_REQUESTS
        );
    }
    // Then it streams 2,000 records: 5 are written.
    let (tx, opened) = open(app, "crit-key", &records(100)).await;
    for _ in 1..20 {
        tx.send(Bytes::from(records(100))).await.expect("send");
    }
    drop(tx);
    let codes = codes(opened.expect("stream")).await;
    assert_eq!(codes.len(), 2000);
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 5, "{codes:?}");
    assert!(codes.iter().all(|c| *c == 200 || *c == 429));
    // The standard tenant wants 500 records over the same second.
    assert_eq!(
        post_v1(app, "std-key", 500).await,
        axum::http::StatusCode::ACCEPTED
    );

    let directory = app.ingest.tenants.load();
    let crit = directory.get("crit").expect("crit");
    assert_eq!(
        crit.stats()
            .offered_records
            .load(std::sync::atomic::Ordering::Relaxed),
        20,
        "only what its own budget could admit is demand"
    );
    assert_eq!(
        crit.stats()
            .rejected_count(Reason::Budget(Scope::Tenant, Dimension::Records)),
        50 + 1995
    );
    s.clock.advance_ms(1000);
    app.adaptive.tick();
    let critical = app.adaptive.stats.class_rate(Priority::Critical);
    let standard = app.adaptive.stats.class_rate(Priority::Standard);
    // Critical keeps its reserve (20 % of 1,000), not the whole limit its stream asked for.
    assert!(critical <= 200.5, "critical: {critical}");
    assert!(standard >= 799.5, "standard keeps the rest: {standard}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_record_and_queued_reports_are_held_while_kept_and_given_back() {
    let s = setup(|_| {});
    let budget = &s.app.ingest.inflight_bodies;
    // A record whose value never ends: its tail is held as it grows.
    let open_record = br#"{"value":{"type":"BINARY","data":""#;
    let (tx, opened) = open(&s.app, "acme-key", open_record).await;
    let reports = opened.expect("stream");
    let a = vec![b'A'; 64 * 1024];
    for _ in 0..4 {
        tx.send(Bytes::from(a.clone())).await.expect("send");
    }
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while budget.held() < 4 * 64 * 1024 {
        assert!(std::time::Instant::now() < until, "held {}", budget.held());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let held = budget.held();
    assert!(
        held >= (4 * 64 * 1024 + REPORT_WINDOW) as u64,
        "the tail and the window: {held}"
    );
    assert!(held <= 4 * (4 * 64 * 1024 + REPORT_WINDOW) as u64, "{held}");
    // The record ends; its report is queued (held) until it is taken.
    tx.send(Bytes::from_static(b"\"}}")).await.expect("send");
    drop(tx);
    let codes = codes(reports).await;
    assert_eq!(codes, vec![200]);
    all_given_back(budget).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_longer_than_a_request_may_be_ends_the_stream_while_it_arrives() {
    let s = setup(|c| c.server.max_body_bytes = 100 * 1024);
    let (tx, opened) = open(&s.app, "acme-key", &records(2)).await;
    tx.send(Bytes::from_static(br#"{"value":{"type":"BINARY","data":""#))
        .await
        .expect("send");
    let a = vec![b'A'; 16 * 1024];
    // Sent on while the stream reads; it stops reading at the bound, so keep the sends
    // best-effort.
    let feeder = tokio::spawn(async move {
        for _ in 0..20 {
            if tx.send(Bytes::from(a.clone())).await.is_err() {
                break;
            }
        }
        tx
    });
    let codes = codes(opened.expect("stream")).await;
    assert_eq!(
        codes,
        vec![200, 200, 413],
        "two records, then the one too long"
    );
    drop(feeder.await);
    all_given_back(&s.app.ingest.inflight_bodies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_body_budget_are_refused_server_busy_and_counted() {
    let s = setup(|c| c.server.max_inflight_body_bytes = 200 * 1024);
    let open_record = br#"{"value":{"type":"BINARY","data":""#;
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..8 {
        let (tx, opened) = open(&s.app, "acme-key", open_record).await;
        match opened {
            Ok(reports) => {
                // Grow its tail by 60 KiB; the budget takes three or so.
                let _ = tx.send(Bytes::from(vec![b'A'; 60 * 1024])).await;
                held.push((tx, reports));
            }
            Err(e) => {
                assert_eq!(e.code(), "rate_limited");
                refused += 1;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(s.app.ingest.inflight_bodies.held() <= 200 * 1024);
    // Streams cut short by the budget end with a 429 server_busy report.
    let mut busy_reports = 0;
    for (tx, reports) in held {
        drop(tx);
        let codes = codes(reports).await;
        if codes.last() == Some(&429) {
            busy_reports += 1;
        }
    }
    let directory = s.app.ingest.tenants.load();
    let acme = directory.get("acme").expect("acme");
    assert!(refused + busy_reports >= 4, "{refused} + {busy_reports}");
    assert_eq!(
        acme.stats().rejected_count(Reason::ServerBusy),
        (refused + busy_reports) as u64,
        "every server_busy refusal is counted on the tenant"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_no_reports_is_no_longer_read_and_holds_a_bounded_queue() {
    let s = setup(|c| c.compat.stream_max_unsettled = 50);
    let (tx, opened) = open(&s.app, "acme-key", b"{}").await;
    let reports = opened.expect("stream");
    // 100 chunks of 100 empty records: no report is taken, so the stream reads until its
    // queue is full and then stops.
    let feeder = tokio::spawn(async move {
        let mut sent = 0;
        for _ in 0..100 {
            match tokio::time::timeout(
                Duration::from_millis(300),
                tx.send(Bytes::from(b"{}".repeat(100))),
            )
            .await
            {
                Ok(Ok(())) => sent += 1,
                _ => break,
            }
        }
        (sent, tx)
    });
    let (sent, tx) = feeder.await.expect("feeder");
    assert!(sent < 100, "the stream stopped reading: {sent} chunks sent");
    let held = s.app.ingest.inflight_bodies.held();
    let most = REPORT_WINDOW as u64 + 50 * 200 + 64 * 200 + 1024;
    assert!(
        held <= most,
        "queue of 50 and what is buffered: {held} > {most}"
    );
    let directory = s.app.ingest.tenants.load();
    let acme = directory.get("acme").expect("acme");
    let admitted = acme
        .stats()
        .admitted_records
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        admitted <= 51,
        "no more admitted than the queue holds: {admitted}"
    );
    drop((tx, reports));
}

/// The book (docs/book/src/guarantees.md) states what a queued report costs; keep it true.
#[test]
fn a_queued_report_costs_what_the_book_says() {
    let entry = cost::<V3Types>(None);
    eprintln!("a queued v3 report costs {entry} bytes; fixed {FIXED}");
    assert!(entry <= 96, "a queued v3 report costs {entry} bytes");
    assert_eq!(FIXED, 27 * 1024, "what a stream holds from start to end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_an_open_stream_after_reporting_what_was_sent() {
    let s = setup(|_| {});
    let (tx, opened) = open(&s.app, "acme-key", &records(3)).await;
    let reports = opened.expect("stream");
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.app.start_draining();
    let codes = codes(reports).await;
    assert_eq!(codes, vec![200, 200, 200, 503]);
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_record_anywhere_in_the_first_data_is_the_whole_requests_error() {
    let s = setup(|_| {});
    let mut first = records(40);
    first.extend_from_slice(br#"{"value": {"type": "BINARY", "data": 7}}"#);
    let (_tx, opened) = open(&s.app, "acme-key", &first).await;
    let error = opened.err().expect("refused whole");
    assert_eq!(error.status().as_u16(), 400, "{error:?}");
    let directory = s.app.ingest.tenants.load();
    let acme = directory.get("acme").expect("acme");
    assert_eq!(
        acme.stats()
            .admitted_records
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "nothing of it was written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_ends_just_past_the_bound_is_refused_too() {
    let s = setup(|c| c.server.max_body_bytes = 100_000);
    let head = br#"{"value":{"type":"BINARY","data":""#;
    let mut first = head.to_vec();
    first.extend(std::iter::repeat_n(b'A', 99_900 - head.len()));
    let (tx, opened) = open(&s.app, "acme-key", &first).await;
    let mut rest = vec![b'A'; 596];
    rest.extend_from_slice(b"\"}}");
    tx.send(Bytes::from(rest)).await.expect("send");
    drop(tx);
    let codes = codes(opened.expect("stream")).await;
    assert_eq!(
        codes,
        vec![413],
        "100,500 bytes of record text against 100,000"
    );
}
