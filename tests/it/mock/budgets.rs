//! Budgets through HTTP: each 429 reason with its exact Retry-After, the RateLimit fields, the
//! 413 for a request over the burst, the refusal of a slow upload before its body arrives, and
//! that refused records never reach Kafka. The broker is librdkafka's in-process mock cluster;
//! time is a manual clock the test steps.

use std::time::Duration;

use crate::common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn records(n: usize, tag: &str) -> serde_json::Value {
    let r: Vec<_> = (0..n)
        .map(|i| json!({"value": format!("{tag}-{i}")}))
        .collect();
    json!({ "records": r })
}

/// What the server sends first on `stream` (one read, at most 4 KiB), which must come within
/// 5 s (`what` says why it should).
async fn answer(stream: &mut tokio::net::TcpStream, what: &str) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_records_429_says_exactly_when_to_come_back() {
    let (cluster, gw) = gateway_with_records("test.budget", 10, 10).await;
    let url = gw.url("test.budget");

    let (s, h, a) = post_json(&url, KEY, &records(8, "burst")).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(
        h["ratelimit-policy"],
        "\"tenant-records\";q=10;w=1;qu=\"records\""
    );
    // 2 left; full again in 8 x 100 ms.
    assert_eq!(h["ratelimit"], "\"tenant-records\";r=2;t=1");

    // 5 records wanted, 2 there: 3 more at 10/s is 300 ms.
    let (s, h, a) = post_json(&url, KEY, &records(5, "refused")).await;
    assert_eq!(s, 429);
    assert_eq!(
        a,
        json!({"error":"rate_limited","reason":"tenant_records","retry_after_ms":300,
               "detail":"tenant_records exhausted; retry in 300 ms"})
    );
    assert_eq!(h["retry-after"], "1");
    assert_eq!(
        h["ratelimit"], "\"tenant-records\";r=2;t=1",
        "a refusal charges nothing"
    );

    gw.advance_ms(299);
    let (s, _, a) = post_json(&url, KEY, &records(5, "refused")).await;
    assert_eq!((s, a["retry_after_ms"].as_u64()), (429, Some(1)));
    gw.advance_ms(1);
    let (s, h, _) = post_json(&url, KEY, &records(5, "after")).await;
    assert_eq!(s, 200);
    assert_eq!(h["ratelimit"], "\"tenant-records\";r=0;t=1");

    // An empty bucket refuses before the body is read: one record is 100 ms away.
    let (s, _, a) = post_json(&url, KEY, &records(1, "refused")).await;
    assert_eq!((s, a["retry_after_ms"].as_u64()), (429, Some(100)), "{a}");

    gw.shutdown().await;
    let got = read_all(&cluster.bootstrap_servers(), "test.budget", 1, 13).await;
    assert_eq!(got.len(), 13, "refused records must not be in Kafka");
    assert!(got.iter().all(
        |c| !String::from_utf8_lossy(c.value.as_deref().unwrap_or_default()).contains("refused")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_and_global_budgets_refuse_with_their_own_reasons() {
    let (_cluster, gw) = gateway_on_mock("test.bytes", Time::Manual, |cfg| {
        limit_bytes(cfg, 1000, 1000);
        cfg.tenants.push(tenant("other", "other-key", &["test.*"]));
        cfg.global.records_per_sec = Some(100);
        cfg.global.records_burst = Some(20);
    })
    .await;
    let url = gw.url("test.bytes");

    // 600 value bytes: the JSON string "xxx..." is 602 bytes of value text.
    let big = json!({"records":[{"value": "x".repeat(600)}]});
    let (s, _, _) = post_json(&url, KEY, &big).await;
    assert_eq!(s, 200);
    let (s, h, a) = post_json(&url, KEY, &big).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_bytes")),
        "{a}"
    );
    // Refused before the body is read, so the declared length is what must fit: the body is
    // 626 bytes, 390 are left (602 value bytes and 8 of record overhead were charged), 236
    // bytes at 1000/s is 236 ms.
    assert_eq!(a["retry_after_ms"], 236);
    assert!(h["ratelimit-policy"]
        .to_str()
        .unwrap_or("")
        .contains("\"global-records\";q=20;w=1;qu=\"records\""));

    // The other tenant has no budget of its own but shares the global one.
    let (s, _, _) = post_json(&url, "other-key", &records(19, "g")).await;
    assert_eq!(s, 200);
    let (s, _, a) = post_json(&url, "other-key", &records(2, "g")).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("global_records")),
        "{a}"
    );
    assert_eq!(a["retry_after_ms"], 10);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_larger_than_the_burst_is_413_not_429() {
    let (_cluster, gw) = gateway_with_records("test.burst", 100, 5).await;
    let (s, h, a) = post_json(&gw.url("test.burst"), KEY, &records(6, "x")).await;
    assert_eq!(
        (s, a["error"].as_str()),
        (413, Some("exceeds_burst")),
        "{a}"
    );
    assert!(h.get("retry-after").is_none());
    // Nothing was charged: the full burst is still there.
    assert_eq!(h["ratelimit"], "\"tenant-records\";r=5;t=0");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upload_is_refused_before_its_body_is_sent() {
    let (_cluster, gw) = gateway_with_bytes("test.slow", 10_000, 10_000).await;
    let (s, _, _) = post_json(
        &gw.url("test.slow"),
        KEY,
        &json!({"records":[{"value": "y".repeat(9_000)}]}),
    )
    .await;
    assert_eq!(s, 200);

    // Announce 5000 bytes and send none of them: the 429 must come anyway.
    let mut stream = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /v1/topics/test.slow/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let text = answer(&mut stream, "answered without waiting for the body").await;
    assert!(text.starts_with("HTTP/1.1 429"), "{text}");
    assert!(text.contains("\"reason\":\"tenant_bytes\""), "{text}");
    // 998 bytes left (9000 value + 2 quotes charged), 5000 declared: 4002 bytes at 10000/s.
    assert!(text.contains("\"retry_after_ms\":401"), "{text}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_within_budget_is_untouched_by_a_noisy_neighbour() {
    let (_cluster, gw) = gateway_on_mock("test.iso", Time::Manual, |cfg| {
        limit_records(cfg, 10, 10);
        let mut quiet = tenant("quiet", "quiet-key", &["test.*"]);
        quiet.records_per_sec = Some(10);
        quiet.records_burst = Some(10);
        cfg.tenants.push(quiet);
    })
    .await;
    let url = gw.url("test.iso");
    let mut refused = 0;
    for _ in 0..30 {
        let (s, _, _) = post_json(&url, KEY, &records(1, "noisy")).await;
        if s == 429 {
            refused += 1;
        }
    }
    assert_eq!(refused, 20);
    for _ in 0..10 {
        let (s, _, a) = post_json(&url, "quiet-key", &records(1, "quiet")).await;
        assert_eq!(s, 200, "{a}");
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_429_for_a_small_body_keeps_the_connection_open() {
    let (_cluster, gw) = gateway_with_records("test.keepalive", 1, 1).await;
    let (s, _, _) = post_json(&gw.url("test.keepalive"), KEY, &records(1, "only")).await;
    assert_eq!(s, 200);

    let mut stream = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let body = r#"{"records":[{"value":1}]}"#;
    let request = format!(
        "POST /v1/topics/test.keepalive/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    for round in 0..2 {
        stream
            .write_all(request.as_bytes())
            .await
            .expect("write on the same connection");
        let text = answer(&mut stream, "answered").await;
        assert!(text.starts_with("HTTP/1.1 429"), "round {round}: {text}");
        assert!(
            !text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_buckets_can_be_hidden_from_tenants() {
    let (_cluster, gw) = gateway_on_mock("test.hide", Time::Manual, |cfg| {
        cfg.tenants[0].records_per_sec = Some(10);
        cfg.global.records_per_sec = Some(100);
        cfg.global.records_burst = Some(3);
        cfg.global.hide_from_tenants = true;
        // A global quota is hidden with the buckets.
        cfg.global.quotas = vec![floodgate::config::QuotaConfig {
            window: floodgate::config::WindowName::Day,
            records: Some(1_000),
            bytes: None,
            mode: Default::default(),
        }];
    })
    .await;
    let url = gw.url("test.hide");
    let (s, h, _) = post_json(&url, KEY, &records(2, "a")).await;
    assert_eq!(s, 200);
    let policy = h["ratelimit-policy"]
        .to_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        policy.contains("tenant-records") && !policy.contains("global"),
        "{policy}"
    );
    assert!(!h["ratelimit"]
        .to_str()
        .unwrap_or_default()
        .contains("global"));
    // A refusal for the global budget still says so.
    let (s, h, a) = post_json(&url, KEY, &records(2, "b")).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("global_records")),
        "{a}"
    );
    assert!(h.get("retry-after").is_some());
    // The operator shows them again, live.
    let (s, _) = admin_put(
        &gw,
        "/admin/global",
        json!({"records_per_sec": 100, "records_burst": 3}),
    )
    .await;
    assert_eq!(s, 200);
    let (_, h, _) = post_json(&url, KEY, &records(1, "c")).await;
    assert!(h["ratelimit-policy"]
        .to_str()
        .unwrap_or_default()
        .contains("global-records"));
    gw.shutdown().await;
}

/// A record with no key, value or headers still costs its record overhead, so a bytes-only
/// budget cannot be flooded with empty records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_records_are_charged_their_overhead() {
    let (_cluster, gw) = gateway_with_bytes("test.empty", 100, 100).await;
    let url = gw.url("test.empty");
    let empty =
        |n: usize| json!({"records": (0..n).map(|_| json!({"value": null})).collect::<Vec<_>>()});
    let (s, _, a) = post_json(&url, KEY, &empty(10_000)).await;
    assert_eq!(
        (s, a["error"].as_str()),
        (413, Some("exceeds_burst")),
        "{a}"
    );
    let (s, _, a) = post_json(&url, KEY, &empty(12)).await;
    assert_eq!(s, 200, "12 x 8 bytes fit in 100: {a}");
    let (s, _, a) = post_json(&url, KEY, &empty(1)).await;
    assert_eq!(
        (s, a["reason"].as_str()),
        (429, Some("tenant_bytes")),
        "{a}"
    );
    gw.shutdown().await;
}
