//! Cluster mode's leases under concurrency: requests that share a tenant's or the global
//! slice wait for its lease one at a time, and one whose tokens another request's lease
//! brought (and a third took first) is not refused for want of rounds while Redis has tokens.

use std::sync::Arc;

use crate::common::*;
use floodgate::budget::ManualClock;
use serde_json::json;

const TOPIC: &str = "test.leases";

/// Review 31 of #37: with a `[global]` budget, a wave of 50 one-record requests, within every
/// budget and with Redis never empty, got 2 admitted: each request's two lease rounds went on
/// waiting for others' leases, whose tokens others took first; and each lease asked for what
/// one request lacked, so the next took it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_within_every_budget_is_admitted_whole() {
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let mut cfg = config(&kafka.bootstrap_servers());
    cfg.cluster.redis_url = Some(redis_url());
    cfg.cluster.key_prefix = redis_prefix("leases-wave");
    // A Redis slowed by a loaded machine past the 25 ms default would put the replica on its
    // local shares (another behaviour, tested in `cluster`): this test is about the leases.
    cfg.cluster.command_timeout_ms = 2_000;
    cfg.global.records_per_sec = Some(1_000);
    cfg.global.records_burst = Some(1_000);
    limit_records(&mut cfg, 1_000, 2_000);
    limit_bytes(&mut cfg, 10 << 20, 10 << 20);
    let gw = Gateway::start_clustered(cfg, clock).await;
    let one = json!({"records": [{"value": 1}]});
    // The producer connected (the clock stands still: nothing refills from here on).
    let (s, _, a) = post_json(&gw.url(TOPIC), KEY, &one).await;
    assert_eq!(s, 200, "{a}");
    let wave: Vec<_> = (0..50)
        .map(|_| {
            let (url, one) = (gw.url(TOPIC), one.clone());
            tokio::spawn(async move { post_json(&url, KEY, &one).await })
        })
        .collect();
    let mut refused = Vec::new();
    for request in wave {
        let (s, _, a) = request.await.expect("task");
        if s != 200 {
            refused.push(format!("{s} {a}"));
        }
    }
    let degraded = crate::common::exposition::metric(&gw, "floodgate_cluster_degraded").await;
    assert!(
        refused.is_empty(),
        "{} refused: {:?} (degraded: {degraded:?})",
        refused.len(),
        refused.first()
    );
    gw.shutdown().await;
}

/// Review 32 of #37: each request the global budget refused made a lease call of its own,
/// 10,000 Redis commands a second from two connections. A lease Redis refused answers the
/// slice's requests for 100 ms (the clock stands still here: for all of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_lease_answers_the_requests_after_it_without_asking_redis() {
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let mut cfg = config(&kafka.bootstrap_servers());
    cfg.cluster.redis_url = Some(redis_url());
    cfg.cluster.key_prefix = redis_prefix("leases-refused");
    cfg.cluster.command_timeout_ms = 2_000;
    cfg.global.records_per_sec = Some(1);
    cfg.global.records_burst = Some(5);
    let gw = Gateway::start_clustered(cfg, clock).await;
    let records =
        |n: usize| json!({"records": (0..n).map(|i| json!({"value": i})).collect::<Vec<_>>()});
    let (s, _, a) = post_json(&gw.url(TOPIC), KEY, &records(4)).await;
    assert_eq!(s, 200, "{a}");
    // One record left in Redis: a request of two passes the look before its body, and its
    // lease is refused.
    for _ in 0..100 {
        let (s, _, a) = post_json(&gw.url(TOPIC), KEY, &records(2)).await;
        assert_eq!(
            (s, a["reason"].as_str()),
            (429, Some("global_records")),
            "{a}"
        );
    }
    let refused = crate::common::exposition::metric(
        &gw,
        "floodgate_cluster_lease_calls_total{scope=\"global\",outcome=\"refused\"}",
    )
    .await
    .unwrap_or(0.0);
    assert!(refused <= 2.0, "{refused} lease calls for 100 refusals");
    gw.shutdown().await;
}
