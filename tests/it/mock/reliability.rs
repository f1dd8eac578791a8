//! Faults on librdkafka's mock cluster: outages, a slow broker, injected request errors. Each
//! test counts what clients were told was accepted and what Kafka holds: none missing, none
//! duplicated.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::*;
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use serde_json::json;

fn cluster(topic: &str, partitions: i32) -> Cluster {
    let c = MockCluster::new(1).expect("mock");
    c.create_topic(topic, partitions, 1).expect("topic");
    c
}

fn batch(tag: &str, n: usize) -> serde_json::Value {
    let r: Vec<_> = (0..n)
        .map(|i| json!({"value": format!("{tag}-{i}")}))
        .collect();
    json!({ "records": r })
}

/// Values in the topic and how often each appears.
async fn counts(
    c: &Cluster,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> HashMap<String, usize> {
    let (b, t) = (c.bootstrap_servers(), topic.to_string());
    let got = tokio::task::spawn_blocking(move || read_back(&b, &t, partitions, expected))
        .await
        .expect("reader");
    let mut counts = HashMap::new();
    for c in got {
        let v = String::from_utf8_lossy(c.value.as_deref().unwrap_or_default()).into_owned();
        *counts.entry(v.trim_matches('"').to_string()).or_insert(0) += 1;
    }
    counts
}

fn assert_exactly_once(counts: &HashMap<String, usize>, accepted: &[(String, usize)]) {
    let mut expected = 0;
    for (tag, n) in accepted {
        for i in 0..*n {
            let v = format!("{tag}-{i}");
            assert_eq!(
                counts.get(&v),
                Some(&1),
                "{v} must be in Kafka exactly once"
            );
            expected += 1;
        }
    }
    assert_eq!(
        counts.values().sum::<usize>(),
        expected,
        "nothing else is in Kafka: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_an_outage_sync_requests_get_503_in_time_and_their_records_land_later() {
    let c = cluster("test.outage", 1);
    let mut cfg = config(&c.bootstrap_servers());
    cfg.kafka.delivery_timeout_ms = 1500;
    let gw = Gateway::start(cfg).await;
    let url = gw.url("test.outage");
    let (s, _, _) = post_json(&url, KEY, &batch("warm", 1)).await;
    assert_eq!(s, 200);

    c.broker_down(1).expect("down");
    let started = Instant::now();
    let (s, _, a) = post_json(&url, KEY, &batch("during", 2)).await;
    let waited = started.elapsed();
    assert_eq!(
        (s, a["error"].as_str()),
        (503, Some("kafka_unavailable")),
        "{a}"
    );
    assert!(
        waited >= Duration::from_millis(1400) && waited < Duration::from_secs(10),
        "{waited:?}"
    );

    c.broker_up(1).expect("up");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (s, _, a) = post_json(&url, KEY, &batch("after", 1)).await;
        if s == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {a}");
    }
    assert_eq!(gw.shutdown().await.unconfirmed_records, 0);
    // The 503'd records were never given up: they are in Kafka once.
    let counts = counts(&c, "test.outage", 1, 4).await;
    assert_exactly_once(
        &counts,
        &[
            ("warm".into(), 1),
            ("during".into(), 2),
            ("after".into(), 1),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_records_accepted_during_an_outage_all_land_once() {
    let c = cluster("test.async-outage", 2);
    let gw = Gateway::start(config(&c.bootstrap_servers())).await;
    let url = format!("{}?async=true", gw.url("test.async-outage"));
    let mut accepted = Vec::new();
    let (s, _, _) = post_json(&gw.url("test.async-outage"), KEY, &batch("warm", 3)).await;
    assert_eq!(s, 200);
    accepted.push(("warm".to_string(), 3));
    c.broker_down(1).expect("down");
    for i in 0..20 {
        let tag = format!("down{i}");
        let (s, _, a) = post_json(&url, KEY, &batch(&tag, 5)).await;
        assert_eq!(s, 202, "{a}");
        accepted.push((tag, 5));
    }
    // Longer than librdkafka's retry backoff and request timeouts: the records must wait.
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.broker_up(1).expect("up");
    assert_eq!(gw.shutdown().await.unconfirmed_records, 0);
    let counts = counts(&c, "test.async-outage", 2, 103).await;
    assert_exactly_once(&counts, &accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_broker_becomes_429s_at_the_edge_and_loses_nothing() {
    let c = cluster("test.slow-broker", 1);
    let mut cfg = config(&c.bootstrap_servers());
    cfg.buffer.max_records = 40;
    cfg.tenants[0].max_buffer_share = Some(1.0);
    let gw = Gateway::start(cfg).await;
    let url = format!("{}?async=true", gw.url("test.slow-broker"));
    let (s, _, _) = post_json(&gw.url("test.slow-broker"), KEY, &batch("warm", 1)).await;
    assert_eq!(s, 200);
    c.broker_round_trip_time(1, Duration::from_millis(400))
        .expect("rtt");

    let (mut accepted, mut refused) = (vec![("warm".to_string(), 1)], 0);
    for i in 0..60 {
        let tag = format!("slow{i}");
        let (s, _, a) = post_json(&url, KEY, &batch(&tag, 10)).await;
        match s {
            202 => accepted.push((tag, 10)),
            429 => {
                assert_eq!(a["reason"].as_str(), Some("buffer_full"), "{a}");
                refused += 1;
            }
            other => panic!("unexpected {other}: {a}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        refused > 0,
        "a 400 ms broker must push back on 60 quick requests"
    );
    assert!(
        accepted.len() > 4,
        "yet some requests pass as space frees up"
    );
    assert_eq!(gw.shutdown().await.unconfirmed_records, 0);
    let total: usize = accepted.iter().map(|(_, n)| n).sum();
    let counts = counts(&c, "test.slow-broker", 1, total).await;
    assert_exactly_once(&counts, &accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retriable_broker_errors_are_retried_without_duplicates() {
    let c = cluster("test.retry", 1);
    let gw = Gateway::start(config(&c.bootstrap_servers())).await;
    let url = gw.url("test.retry");
    let (s, _, _) = post_json(&url, KEY, &batch("warm", 1)).await;
    assert_eq!(s, 200);
    c.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        ],
    );
    let (s, _, a) = post_json(&url, KEY, &batch("retried", 20)).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(gw.shutdown().await.unconfirmed_records, 0);
    let counts = counts(&c, "test.retry", 1, 21).await;
    assert_exactly_once(&counts, &[("warm".into(), 1), ("retried".into(), 20)]);
}
