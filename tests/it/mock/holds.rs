//! `[wait]`: a request whose tokens are due within `max_ms` is held and admitted instead of
//! answered 429, on every wire format, within its seats (per tenant and in all) and its time.
//! The gateway's clock is stepped by the test: a held request is released by a step, never by
//! sleeping; the test only polls the gauge of held requests to know a request is waiting.

use std::time::{Duration, Instant};

use crate::common::exposition::{metric, sample, scrape};
use crate::common::*;
use serde_json::{json, Value};

fn records(n: usize) -> Value {
    let r: Vec<_> = (0..n).map(|i| json!({"value": i})).collect();
    json!({ "records": r })
}

/// A tenant at 50 records/s with a burst of 10 (= rate / 5), and `[wait]` as given.
async fn gateway(max_ms: u64, per_tenant: usize) -> (Cluster, Gateway) {
    gateway_on_mock("test.hold", Time::Manual, move |cfg| {
        cfg.tenants[0].records_per_sec = Some(50);
        cfg.tenants[0].records_burst = Some(10);
        cfg.wait.max_ms = max_ms;
        cfg.wait.max_requests_per_tenant = per_tenant;
    })
    .await
}

/// Waits (real time, bounded) until `n` requests are held.
async fn held(gw: &Gateway, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if metric(gw, "floodgate_admission_held_requests").await == Some(n as f64) {
            return;
        }
        assert!(Instant::now() < deadline, "never {n} held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn spawn_post(url: String, body: Value) -> tokio::task::JoinHandle<(u16, Value)> {
    tokio::spawn(async move {
        let (s, _, a) = post_json(&url, KEY, &body).await;
        (s, a)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_wait_is_held_and_admitted_instead_of_a_429() {
    let (_cluster, gw) = gateway(150, 8).await;
    let url = gw.url("test.hold");
    let (s, _, a) = post_json(&url, KEY, &records(10)).await;
    assert_eq!(s, 200, "{a}");
    // The bucket is empty: one record is 20 ms away. The early check lets it in, its body is
    // read, and admission holds it until the clock has moved 20 ms.
    let one = spawn_post(url.clone(), records(1));
    held(&gw, 1).await;
    gw.advance_ms(19);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!one.is_finished(), "not before its tokens are due");
    gw.advance_ms(1);
    let (s, a) = one.await.expect("task");
    assert_eq!(s, 200, "{a}");
    // 10 records are 200 ms away, longer than max_ms: refused at once, with the real wait.
    let (s, h, a) = post_json(&url, KEY, &records(10)).await;
    assert_eq!((s, a["retry_after_ms"].as_u64()), (429, Some(200)), "{a}");
    assert_eq!(h["retry-after"], "1");
    let m = scrape(&gw).await;
    let outcome = |o: &str| {
        sample(
            &m,
            &format!("floodgate_admission_holds_total{{outcome=\"{o}\"}}"),
        )
    };
    assert_eq!(
        (outcome("admitted"), outcome("refused"), outcome("full")),
        (1.0, 0.0, 0.0)
    );
    assert_eq!(
        sample(
            &m,
            "floodgate_tenant_requests_total{tenant=\"acme\",outcome=\"rejected\"}"
        ),
        1.0,
        "the held request is not a refusal"
    );
    gw.shutdown().await;
}

/// Confluent v2, v3 and `records:batch` go through the same hold: one decision for every
/// wire format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wire_format_is_held_the_same_way() {
    let (_cluster, gw) = gateway(250, 8).await;
    let (s, _, a) = post_json(&gw.url("test.hold"), KEY, &records(10)).await;
    assert_eq!(s, 200, "{a}");
    let base = format!("http://{}", gw.addr);
    let requests = [
        (
            format!("{base}/topics/test.hold"),
            "application/vnd.kafka.json.v2+json",
            json!({"records": [{"value": 1, "partition": null}]}).to_string(),
            200,
        ),
        (
            format!("{base}/v3/clusters/c/topics/test.hold/records"),
            "application/json",
            json!({"value": {"type": "JSON", "data": 1}}).to_string(),
            200,
        ),
        (
            format!("{base}/v3/clusters/c/topics/test.hold/records:batch"),
            "application/json",
            json!({"entries": [{"id": "a", "value": {"type": "JSON", "data": 1}}]}).to_string(),
            207,
        ),
    ];
    for (url, content_type, body, ok) in requests {
        let task = tokio::spawn(async move { post_raw(&url, KEY, content_type, body).await });
        held(&gw, 1).await;
        gw.advance_ms(20);
        let (s, _, a) = task.await.expect("task");
        assert_eq!(s, ok, "{content_type}: {a}");
        if ok == 200 && content_type == "application/json" {
            assert_eq!(a["error_code"], 200, "the v3 report says written: {a}");
        }
    }
    let m = scrape(&gw).await;
    assert_eq!(
        sample(&m, "floodgate_admission_holds_total{outcome=\"admitted\"}"),
        3.0
    );
    gw.shutdown().await;
}

/// Each record of a v3 stream is admitted on its own, through the same hold: the record over
/// the burst waits for its tokens (the stream's pump with it) and is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_record_is_held_like_a_request() {
    use std::io::Write as _;
    let (_cluster, gw) = gateway(250, 8).await;
    let addr = gw.addr;
    let reader = tokio::task::spawn_blocking(move || {
        let (mut stream, mut reader) =
            crate::common::v3::open_stream(addr, "/v3/clusters/c/topics/test.hold/records");
        let records: String = (0..11)
            .map(|i| json!({"value": {"type": "JSON", "data": i}}).to_string())
            .collect();
        crate::common::v3::write_chunk(&mut stream, records.as_bytes()).expect("records");
        stream.write_all(b"0\r\n\r\n").expect("end");
        crate::common::v3::read_reports(&mut reader)
    });
    held(&gw, 1).await;
    gw.advance_ms(20);
    let reports = reader.await.expect("reader");
    assert_eq!(reports.len(), 11, "{reports:?}");
    for r in &reports {
        assert_eq!(r["error_code"], 200, "{r}");
    }
    let m = scrape(&gw).await;
    assert_eq!(
        sample(&m, "floodgate_admission_holds_total{outcome=\"admitted\"}"),
        1.0
    );
    gw.shutdown().await;
}

/// Seats are bounded per tenant (and in all): a request finding none is refused at once; two
/// held requests wanting the same token are decided again, and one that cannot be admitted
/// within max_ms is refused after its hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_are_bounded_in_seats_and_in_time() {
    let (_cluster, gw) = gateway(30, 2).await;
    let url = gw.url("test.hold");
    let (s, _, a) = post_json(&url, KEY, &records(10)).await;
    assert_eq!(s, 200, "{a}");
    let first = spawn_post(url.clone(), records(1));
    let second = spawn_post(url.clone(), records(1));
    held(&gw, 2).await;
    // The tenant's two seats are taken: refused at once, with the wait.
    let (s, _, a) = post_json(&url, KEY, &records(1)).await;
    assert_eq!((s, a["retry_after_ms"].as_u64()), (429, Some(20)), "{a}");
    // One token is due in 20 ms, and both want it: one is admitted, the other would need 20 ms
    // more, 40 in all, past max_ms (30): refused.
    gw.advance_ms(20);
    let mut statuses = vec![first.await.expect("task").0, second.await.expect("task").0];
    statuses.sort_unstable();
    assert_eq!(statuses, vec![200, 429]);
    let m = scrape(&gw).await;
    let outcome = |o: &str| {
        sample(
            &m,
            &format!("floodgate_admission_holds_total{{outcome=\"{o}\"}}"),
        )
    };
    assert_eq!(
        (outcome("admitted"), outcome("refused"), outcome("full")),
        (1.0, 1.0, 1.0)
    );
    assert_eq!(
        sample(&m, "floodgate_admission_held_requests"),
        0.0,
        "seats given back"
    );
    gw.shutdown().await;
}

/// check-config and the admin API say what a burst below its rate costs clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_below_its_rate_is_warned_by_the_admin_api() {
    let (_cluster, gw) = gateway(0, 8).await;
    let (s, body) = admin(
        &gw,
        reqwest::Method::GET,
        "/admin/tenants/acme",
        None,
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let warning = &body["warnings"][0];
    assert_eq!(warning["field"], "records_burst", "{body}");
    let detail = warning["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("about 20% of its rate"), "{detail}");
    // Raised to one second of its rate: no warning.
    let (s, body) = admin(
        &gw,
        reqwest::Method::PATCH,
        "/admin/tenants/acme",
        Some(json!({"records_per_sec": 50, "records_burst": 50})),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert!(body.get("warnings").is_none(), "{body}");
    gw.shutdown().await;
}
