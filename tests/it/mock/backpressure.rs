//! Backpressure from a stalled broker reaches clients as immediate 429s, and nothing of a
//! refused request reaches Kafka. The broker is librdkafka's mock cluster, taken down and
//! brought back.

use std::time::{Duration, Instant};

use crate::common::*;
use rdkafka::mocking::MockCluster;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_broker_fills_the_buffer_and_further_requests_get_429_at_once() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("test.stall", 2, 1).expect("topic");
    let mut cfg = config(&cluster.bootstrap_servers());
    cfg.buffer.max_records = 20;
    cfg.tenants[0].max_buffer_share = Some(1.0);
    let gw = Gateway::start(cfg).await;
    let url = format!("{}?async=true", gw.url("test.stall"));
    let batch = |tag: &str| {
        let r: Vec<_> = (0..5)
            .map(|i| json!({"value": format!("{tag}-{i}")}))
            .collect();
        json!({ "records": r })
    };

    // Warm up (topic metadata cached, producer connected), then stall the broker.
    let (s, _, a) = post_json(&gw.url("test.stall"), KEY, &batch("warm")).await;
    assert_eq!(s, 200, "{a}");
    cluster.broker_down(1).expect("broker down");

    let mut accepted = Vec::new();
    for i in 0..4 {
        let tag = format!("ok{i}");
        let (s, _, a) = post_json(&url, KEY, &batch(&tag)).await;
        assert_eq!(s, 202, "{a}");
        accepted.push(tag);
    }
    for i in 0..20 {
        let started = Instant::now();
        let (s, h, a) = post_json(&url, KEY, &batch(&format!("refused{i}"))).await;
        assert_eq!((s, a["reason"].as_str()), (429, Some("buffer_full")), "{a}");
        assert!(h.contains_key("retry-after"));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a full buffer must refuse at once, not wait for room"
        );
    }

    // The broker comes back: the held records are delivered, space frees, requests pass again.
    cluster.broker_up(1).expect("broker up");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (s, _, a) = post_json(&url, KEY, &batch("after")).await;
        if s == 202 {
            break;
        }
        assert_eq!(a["reason"].as_str(), Some("buffer_full"), "{a}");
        assert!(
            Instant::now() < deadline,
            "buffer never drained after broker_up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(gw.shutdown().await.unconfirmed_records, 0);

    let got = read_all(&cluster.bootstrap_servers(), "test.stall", 2, 30).await;
    let values = value_texts(&got);
    assert_eq!(
        values.len(),
        30,
        "warm 5 + accepted 20 + after 5: {values:?}"
    );
    assert!(values.iter().all(|v| !v.contains("refused")), "{values:?}");
    for tag in accepted {
        for i in 0..5 {
            let want = format!("\"{tag}-{i}\"");
            assert_eq!(
                values.iter().filter(|v| **v == want).count(),
                1,
                "{want} exactly once"
            );
        }
    }
}
