//! Content-coded bodies (`Content-Encoding`) within floodgate's bounds: a bomb is refused while
//! it inflates and its memory given back; `max_body_bytes` and the tenants' byte budgets count
//! what a body inflates to; an unknown coding is 415 with `Accept-Encoding`, a broken body 400
//! naming its coding — on every wire format, streams included.

use std::time::{Duration, Instant};

use crate::common::codings::{gzip, gzip_bomb, zstd, zstd_bomb, Fill};
use crate::common::exposition::{sample, scrape};
use crate::common::*;
use serde_json::{json, Value};

/// POSTs `body` with `Content-Encoding: encoding`; status, headers, answer text.
async fn post_coded_as(
    url: &str,
    content_type: &str,
    encoding: &str,
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let headers = [
        ("content-type", content_type),
        ("content-encoding", encoding),
    ];
    post_text(url, KEY, &headers, body).await
}

/// A gateway on the mock cluster with `topic`, on the real clock, and its `/v1` URL for it.
async fn gateway(topic: &str) -> (Cluster, Gateway, String) {
    let (cluster, gw) = gateway_on_mock(topic, Time::Real, |_| {}).await;
    let url = gw.url(topic);
    (cluster, gw, url)
}

/// [`post_coded_as`] a JSON body.
async fn post_coded(
    url: &str,
    encoding: &str,
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, String) {
    post_coded_as(url, "application/json", encoding, body).await
}

/// [`post_coded`] a body that must be answered `status`; the answer's text. `what` says which.
async fn answered(url: &str, encoding: &str, body: Vec<u8>, status: u16, what: &str) -> String {
    let (got, _, text) = post_coded(url, encoding, body).await;
    assert_eq!(got, status, "{what}: {text}");
    text
}

/// 1 GiB of `fill` inside `{"records":[...]}`, in gzip and in zstd: each coding and its bomb.
fn bombs(fill: Fill) -> [(&'static str, Vec<u8>); 2] {
    [
        ("gzip", gzip_bomb(fill).to_vec()),
        ("zstd", zstd_bomb(fill).to_vec()),
    ]
}

fn records(n: usize, size: usize) -> Vec<u8> {
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"key": format!("k{i}"), "value": format!("{i}:{}", "v".repeat(size))}))
        .collect();
    json!({ "records": items }).to_string().into_bytes()
}

/// Waits until no body bytes are held (a refused body's hold is given back when its reader is
/// done with it, lingering included).
async fn budget_given_back(gw: &Gateway) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = sample(&scrape(gw).await, "floodgate_body_inflight_bytes ");
        if held == 0.0 || Instant::now() > deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the gateway inflated of `encoding`, and what it took in for it, so far.
async fn inflated(gw: &Gateway, encoding: &str) -> (f64, f64) {
    let metrics = scrape(gw).await;
    let series = |what: &str| {
        sample(
            &metrics,
            &format!("floodgate_body_encoded_{what}_bytes_total{{encoding=\"{encoding}\"}}"),
        )
    };
    (series("inflated"), series("received"))
}

/// 1 GiB of white space inside `{"records":[...]}` — valid JSON to its last byte — in about
/// 1 MB of gzip and in a 32 KB zstd frame: 413 naming the ratio, with at most a piece past the
/// ratio inflated (128 KiB: not 1 GiB, nor `max_body_bytes`), and nothing held after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bomb_is_refused_while_it_inflates_naming_the_ratio() {
    let (_cluster, gw, url) = gateway("test.bomb").await;
    for (encoding, bomb) in bombs(Fill::Spaces) {
        let text = answered(&url, encoding, bomb, 413, encoding).await;
        let answer: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(answer["error"], "body_too_large", "{text}");
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("100 times") && detail.contains("max_inflation_ratio"),
            "{detail}"
        );
        let (inflated, received) = inflated(&gw, encoding).await;
        assert!(
            inflated > 0.0 && inflated <= received * 100.0 + 128.0 * 1024.0,
            "{encoding}: {inflated} bytes inflated from {received}"
        );
        assert!(inflated < 8.0 * 1024.0 * 1024.0, "{encoding}: {inflated}");
        assert_eq!(budget_given_back(&gw).await, 0.0, "{encoding}");
    }
    gw.shutdown().await;
}

/// 1 GiB of zeros is not JSON: refused at its first inflated piece (400), a piece inflated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bomb_of_zeros_is_refused_at_its_first_piece() {
    let (_cluster, gw, url) = gateway("test.zeros").await;
    for (encoding, bomb) in bombs(Fill::Zeros) {
        let text = answered(&url, encoding, bomb, 400, encoding).await;
        assert!(text.contains("malformed_body"), "{text}");
        let (inflated, _) = inflated(&gw, encoding).await;
        assert!(inflated <= 256.0 * 1024.0, "{encoding}: {inflated}");
        assert_eq!(budget_given_back(&gw).await, 0.0, "{encoding}");
    }
    gw.shutdown().await;
}

/// Fifty bombs at once: each refused (413 while inflating, or 429 when the body budget cannot
/// hold one more decoder), none answered 200, and the budget is whole again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_at_once_are_each_refused_and_the_budget_comes_back() {
    let (_cluster, gw, url) = gateway("test.bombs").await;
    let (gz, zs) = (gzip_bomb(Fill::Spaces), zstd_bomb(Fill::Spaces));
    let posts: Vec<_> = (0..50)
        .map(|i| {
            let (url, body, encoding) = if i % 2 == 0 {
                (url.clone(), gz.to_vec(), "gzip")
            } else {
                (url.clone(), zs.to_vec(), "zstd")
            };
            tokio::spawn(async move { post_coded(&url, encoding, body).await.0 })
        })
        .collect();
    let mut statuses = Vec::new();
    for p in posts {
        statuses.push(p.await.expect("task"));
    }
    assert!(
        statuses.iter().all(|s| *s == 413 || *s == 429),
        "{statuses:?}"
    );
    assert!(statuses.contains(&413), "{statuses:?}");
    assert_eq!(budget_given_back(&gw).await, 0.0);
    gw.shutdown().await;
}

/// `max_body_bytes` bounds what a body inflates to, not what it is sent in: a 2 KB gzip body
/// of 200 KB of records is 413 against a 100 KB limit, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_body_bytes_bounds_the_inflated_body() {
    let (_cluster, gw) = gateway_on_mock("test.inflated", Time::Real, |cfg| {
        cfg.server.max_body_bytes = 100_000;
        cfg.server.max_inflation_ratio = 1_000;
    })
    .await;
    let body = records(200, 1000);
    let wire = gzip(&body);
    assert!(wire.len() < 10_000, "{}", wire.len());
    let (status, _, text) = post_coded(&gw.url("test.inflated"), "gzip", wire).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("100000 bytes"), "{text}");
    // Under the limit, the same kind of body is admitted.
    let small = gzip(&records(20, 1000));
    let (status, _, text) = post_coded(&gw.url("test.inflated"), "gzip", small).await;
    assert_eq!(status, 200, "{text}");
    gw.shutdown().await;
}

/// The tenants' byte budgets charge the records as they reach Kafka, not the coded body: 20 KB
/// of values in a 1 KB zstd body against a 10 KB bytes burst can never be admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_budgets_charge_the_inflated_records() {
    let (_cluster, gw) = gateway_with_bytes("test.charge", 10_000, 10_000).await;
    let wire = zstd(&records(20, 1000));
    assert!(wire.len() < 2_000, "{}", wire.len());
    let (status, _, text) = post_coded(&gw.url("test.charge"), "zstd", wire).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("exceeds_burst"), "{text}");
    let (status, _, text) =
        post_coded(&gw.url("test.charge"), "zstd", zstd(&records(5, 1000))).await;
    assert_eq!(status, 200, "{text}");
    gw.shutdown().await;
}

/// An unknown coding, or three stacked, is 415 with `Accept-Encoding` on every route — in
/// floodgate's shape on /v1, Confluent's on v2 and v3 — and `identity` is no coding at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_codings_are_415_with_accept_encoding_everywhere() {
    let (_cluster, gw) = gateway_on_mock("test.enc", Time::Real, |_| {}).await;
    let base = format!("http://{}", gw.addr);
    let v1 = records(1, 10);
    let v2 = json!({"records": [{"value": {"a": 1}}]})
        .to_string()
        .into_bytes();
    let v3 = json!({"value": {"type": "JSON", "data": 1}})
        .to_string()
        .into_bytes();
    let batch = json!({"entries": [{"id": "1", "value": {"type": "JSON", "data": 1}}]})
        .to_string()
        .into_bytes();
    let routes = [
        (
            gw.url("test.enc"),
            "application/json",
            v1,
            "unsupported_encoding",
        ),
        (
            format!("{base}/topics/test.enc"),
            "application/vnd.kafka.json.v2+json",
            v2,
            "41501",
        ),
        (
            format!("{base}/v3/clusters/c/topics/test.enc/records"),
            "application/json",
            v3,
            "41501",
        ),
        (
            format!("{base}/v3/clusters/c/topics/test.enc/records:batch"),
            "application/json",
            batch,
            "41501",
        ),
    ];
    for (url, content_type, body, code) in &routes {
        for encoding in ["br", "gzip, gzip, gzip", "compress"] {
            let (status, headers, text) =
                post_coded_as(url, content_type, encoding, body.clone()).await;
            assert_eq!(status, 415, "{url} {encoding}: {text}");
            assert!(text.contains(code), "{url}: {text}");
            assert_eq!(
                headers.get("accept-encoding").and_then(|v| v.to_str().ok()),
                Some("gzip, deflate, zstd, snappy, identity"),
                "{url}"
            );
        }
        let (status, _, text) = post_coded_as(url, content_type, "identity", body.clone()).await;
        assert!((200..300).contains(&status), "{url} identity: {text}");
    }
    gw.shutdown().await;
}

/// A body that is not valid data of its coding is 400 naming the coding, on /v1 and on a v3
/// stream; a refused body's hold is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_coded_body_is_400_naming_its_coding() {
    let (_cluster, gw) = gateway_on_mock("test.broken", Time::Real, |_| {}).await;
    let base = format!("http://{}", gw.addr);
    let json = records(3, 10);
    let mut truncated = zstd(&json);
    truncated.truncate(truncated.len() - 4);
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("gzip", json.clone(), "not valid gzip"),
        (
            "deflate",
            b"\x00\x01\x02 not deflate".to_vec(),
            "not valid deflate",
        ),
        ("zstd", truncated, "not valid zstd"),
        (
            "snappy",
            b"\xff\x06\x00\x00sNaPpY\x00\x09\x00\x00junk".to_vec(),
            "not valid snappy",
        ),
    ];
    for (encoding, body, says) in &cases {
        let (status, _, text) = post_coded(&gw.url("test.broken"), encoding, body.clone()).await;
        assert_eq!(status, 400, "{encoding}: {text}");
        assert!(
            text.contains("malformed_body") && text.contains(says),
            "{encoding}: {text}"
        );
    }
    let (status, _, text) = post_coded(
        &format!("{base}/v3/clusters/c/topics/test.broken/records"),
        "gzip",
        b"{\"value\":{\"type\":\"JSON\",\"data\":1}}".to_vec(),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("not valid gzip"), "{text}");
    assert_eq!(budget_given_back(&gw).await, 0.0);
    gw.shutdown().await;
}

/// A keyed request's fingerprint is its inflated body: a retry sent the same way is replayed,
/// and so is the same records in another coding; other records under the key are 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_coded_request_is_replayed_to_its_retry() {
    let (_cluster, gw, url) = gateway("test.keyed").await;
    let body = records(3, 10);
    let send = |encoding: &'static str, wire: Vec<u8>| {
        let url = url.clone();
        async move {
            let response = client()
                .post(&url)
                .bearer_auth(KEY)
                .header("content-type", "application/json")
                .header("content-encoding", encoding)
                .header("idempotency-key", "coded-1")
                .body(wire)
                .send()
                .await
                .expect("sent");
            let replayed = response.headers().contains_key("idempotent-replayed");
            (response.status().as_u16(), replayed)
        }
    };
    assert_eq!(send("gzip", gzip(&body)).await, (200, false));
    assert_eq!(send("gzip", gzip(&body)).await, (200, true));
    assert_eq!(send("zstd", zstd(&body)).await, (200, true));
    assert_eq!(send("gzip", gzip(&records(4, 10))).await.0, 422);
    gw.shutdown().await;
}

/// A coded upload refused while it arrives is answered, and its rest drained as it came: the
/// client reads its 413 rather than a reset, and the drain inflates nothing (without the
/// switch it would inflate up to a megabyte of what nobody reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_coded_upload_is_drained_as_it_came() {
    let (_cluster, gw) = gateway_with_records("test.drain", 100, 100).await;
    // 6,000 records of noise (it hardly compresses): 800 KB of gzip, 1.3 MB inflated.
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let items: Vec<Value> = (0..6000)
        .map(|i| {
            let noise: String = (0..160)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    char::from(b'!' + (x % 90) as u8)
                })
                .filter(|c| *c != '"' && *c != '\\')
                .collect();
            json!({"key": format!("k{i}"), "value": noise})
        })
        .collect();
    let body = json!({ "records": items }).to_string().into_bytes();
    let wire = gzip(&body);
    assert!(
        wire.len() < 1 << 20 && body.len() > wire.len(),
        "{}",
        wire.len()
    );
    let (status, _, text) = post_coded(&gw.url("test.drain"), "gzip", wire).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("exceeds_burst"), "{text}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (inflated, received) = inflated(&gw, "gzip").await;
    assert!(
        inflated < 512.0 * 1024.0,
        "{inflated} bytes inflated of {received} received"
    );
    assert_eq!(budget_given_back(&gw).await, 0.0);
    gw.shutdown().await;
}
