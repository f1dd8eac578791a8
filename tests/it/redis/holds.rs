//! `[wait]` in cluster mode: a request whose tenant slice is short, and whose lease Redis
//! refuses with a short wait, is held for that wait (on the admission clock, which the test
//! steps) and leased again, exactly as a single replica holds it — not answered 429.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::exposition::{metric, sample, scrape};
use crate::common::*;
use floodgate::budget::ManualClock;
use serde_json::{json, Value};

const TOPIC: &str = "test.cluster-hold";

fn records(n: usize) -> Value {
    let r: Vec<_> = (0..n).map(|i| json!({"value": i})).collect();
    json!({ "records": r })
}

/// Waits (real time, bounded) until `n` requests are held.
async fn held(gw: &Gateway, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(gw, "floodgate_admission_held_requests").await != Some(n) {
        assert!(Instant::now() < deadline, "never {n} held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_refused_for_a_short_wait_is_held_and_leased_again() {
    let kafka = mock_cluster(&[TOPIC]);
    let clock = Arc::new(ManualClock::new());
    clock.advance_ms(1_000_000);
    let mut cfg = config(&kafka.bootstrap_servers());
    cfg.cluster.redis_url = Some(redis_url());
    cfg.cluster.key_prefix = redis_prefix("cluster-hold");
    cfg.cluster.command_timeout_ms = 200;
    limit_records(&mut cfg, 50, 10);
    cfg.wait.max_ms = 250;
    let gw = Gateway::start_clustered(cfg, clock.clone()).await;
    let url = gw.url(TOPIC);
    let (s, _, a) = post_json(&url, KEY, &records(10)).await;
    assert_eq!(s, 200, "{a}");
    // The tenant's burst is spent cluster-wide: one record is 20 ms away in Redis.
    let one = tokio::spawn(async move { post_json(&url, KEY, &records(1)).await });
    held(&gw, 1.0).await;
    clock.advance_ms(19);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!one.is_finished(), "not before its tokens are due");
    clock.advance_ms(1);
    let (s, _, a) = one.await.expect("task");
    assert_eq!(s, 200, "{a}");
    let m = scrape(&gw).await;
    assert_eq!(
        sample(&m, "floodgate_admission_holds_total{outcome=\"admitted\"}"),
        1.0
    );
    assert_eq!(
        sample(
            &m,
            "floodgate_tenant_requests_total{tenant=\"acme\",outcome=\"rejected\"}"
        ),
        0.0,
        "held, never refused"
    );
    gw.shutdown().await;
}
