//! Topic metadata: answered from a snapshot refreshed in the background, so a tenant inventing
//! topic names cannot starve others, a transient broker error is a 503 (never a cached 404),
//! and readiness probes cost no Kafka request.

use std::time::{Duration, Instant};

use crate::common::*;
use rdkafka::types::RDKafkaRespErr;
use reqwest::Method;
use serde_json::json;

fn one() -> serde_json::Value {
    json!({"records":[{"value":1}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_between_leaders_is_503_not_404() {
    let (cluster, gw) = gateway_on_mock("test.flaky", Time::Real, |cfg| {
        cfg.kafka.metadata_ttl_ms = 200;
    })
    .await;
    let url = gw.url("test.flaky");
    let (s, _, a) = post_json(&url, KEY, &one()).await;
    assert_eq!(s, 200, "{a}");
    cluster
        .topic_error(
            "test.flaky",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
        )
        .expect("topic error");
    // Within a refresh or two the catalog sees the error; from then on: 503, never 404.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _, a) = post_json(&url, KEY, &one()).await;
        assert_ne!(s, 404, "a transient error is not a missing topic: {a}");
        if s == 503 {
            assert_eq!(a["error"], "kafka_unavailable", "{a}");
            break;
        }
        assert!(Instant::now() < deadline, "the error was never seen: {a}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster
        .topic_error("test.flaky", RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR)
        .expect("clear");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _, a) = post_json(&url, KEY, &one()).await;
        if s == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never served again: {a}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.shutdown().await;
}

/// One tenant sends requests for 200 invented topics at once against a slow broker; another
/// tenant's first request for a real topic is served at once, and the inventor gets 404s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invented_topics_do_not_starve_other_tenants() {
    let (cluster, gw) = gateway_on_mock("test.real", Time::Real, |cfg| {
        cfg.tenants.push(tenant("quiet", "quiet-key", &["test.*"]));
        cfg.kafka.metadata_timeout_ms = 5_000;
        // The flood is 200 connections from one address at once, each unauthenticated until
        // its request is read: allowed here, so the test measures metadata, not that bound.
        cfg.server.max_unauthenticated_per_address = 256;
    })
    .await;
    // The first refresh has the topic; then the broker becomes slow.
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin(&gw, Method::GET, "/readyz", None, None).await.0 != 200 {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster
        .broker_round_trip_time(1, Duration::from_millis(300))
        .expect("rtt");
    let flood: Vec<_> = (0..200)
        .map(|i| {
            let url = gw.url(&format!("test.invented.{i}"));
            tokio::spawn(async move { post_json(&url, KEY, &one()).await.0 })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let url = format!("{}?async=true", gw.url("test.real"));
    let started = Instant::now();
    let (s, _, a) = post_json(&url, "quiet-key", &one()).await;
    assert_eq!(s, 202, "{a}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a cached topic waits for no metadata request: {:?}",
        started.elapsed()
    );
    for request in flood {
        let s = request.await.expect("request");
        assert_eq!(s, 404);
    }
    gw.shutdown().await;
}

/// With the broker far slower than any probe's patience, a hundred probes at once are answered
/// from the latch, each without waiting for Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_probes_never_wait_for_kafka() {
    let (cluster, gw) = gateway_on_mock("test.probe", Time::Real, |_| {}).await;
    cluster
        .broker_round_trip_time(1, Duration::from_secs(3))
        .expect("rtt");
    let probes: Vec<_> = (0..100)
        .map(|_| {
            let url = gw.admin_url("/readyz");
            tokio::spawn(async move {
                let started = Instant::now();
                let status = client().get(url).send().await.expect("probe").status();
                (status.as_u16(), started.elapsed())
            })
        })
        .collect();
    for probe in probes {
        let (status, took) = probe.await.expect("probe");
        assert!(status == 200 || status == 503, "{status}");
        assert!(took < Duration::from_secs(1), "a probe waited {took:?}");
    }
    gw.shutdown().await;
}
