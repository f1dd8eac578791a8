//! `[wait]`: a request whose tokens are due within `max_ms` is held and admitted instead of
//! answered 429, on every wire format, within its seats (per tenant and in all) and its time.
//! The gateway's clock is stepped by the test: a held request is released by a step, never by
//! sleeping; the test only polls the gauge of held requests to know a request is waiting.

use std::time::{Duration, Instant};

use crate::common::exposition::{metric, sample, scrape};
use crate::common::v3::stream_chunks;
use crate::common::*;
use serde_json::{json, Value};

fn records(n: usize) -> Value {
    let r: Vec<_> = (0..n).map(|i| json!({"value": i})).collect();
    json!({ "records": r })
}

/// A tenant at 50 records/s with a burst of 10 (= rate / 5), and `[wait]` as given.
async fn gateway(max_ms: u64, per_tenant: usize) -> (Cluster, Gateway) {
    gateway_on_mock("test.hold", Time::Manual, move |cfg| {
        limit_records(cfg, 50, 10);
        cfg.wait.max_ms = max_ms;
        cfg.wait.max_requests_per_tenant = per_tenant;
    })
    .await
}

/// [`gateway`], with the burst spent by one request of ten records (admitted): the next record
/// is 20 ms away. Its produce URL.
async fn emptied(max_ms: u64, per_tenant: usize) -> (Cluster, Gateway, String) {
    let (cluster, gw) = gateway(max_ms, per_tenant).await;
    let url = gw.url("test.hold");
    let (s, _, a) = post_json(&url, KEY, &records(10)).await;
    assert_eq!(s, 200, "{a}");
    (cluster, gw, url)
}

/// The holds counted so far: admitted, refused (after the hold), full (no seat).
async fn holds(gw: &Gateway) -> (f64, f64, f64) {
    let m = scrape(gw).await;
    let outcome = |o: &str| {
        sample(
            &m,
            &format!("floodgate_admission_holds_total{{outcome=\"{o}\"}}"),
        )
    };
    (outcome("admitted"), outcome("refused"), outcome("full"))
}

/// A v3 stream of `n` JSON records in one chunk, from a blocking task: its reports.
fn stream_records(addr: std::net::SocketAddr, n: usize) -> tokio::task::JoinHandle<Vec<Value>> {
    let records: String = (0..n)
        .map(|i| json!({"value": {"type": "JSON", "data": i}}).to_string())
        .collect();
    let path = "/v3/clusters/c/topics/test.hold/records";
    tokio::task::spawn_blocking(move || stream_chunks(addr, path, [records.into_bytes()]))
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
    let (_cluster, gw, url) = emptied(150, 8).await;
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
    assert_eq!(holds(&gw).await, (1.0, 0.0, 0.0));
    assert_eq!(
        sample(
            &scrape(&gw).await,
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
    let (_cluster, gw, _) = emptied(250, 8).await;
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
    assert_eq!(holds(&gw).await.0, 3.0);
    gw.shutdown().await;
}

/// An open v3 stream's records are never held: a hold would suspend the stream's own bounds
/// (its credential, its longest time, shutdown) with its admitted records unsent. The record
/// over the burst gets its 429 report at once, with its wait in milliseconds, while the clock
/// stands still. Only the open is held (before the stream exists), as a request is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_record_is_never_held() {
    let (_cluster, gw) = gateway(250, 8).await;
    let reader = stream_records(gw.addr, 11);
    // Real time, bounded: the reports come without the clock moving, or never.
    let reports = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("every report without a hold")
        .expect("reader");
    assert_eq!(reports.len(), 11, "{reports:?}");
    for r in &reports[..10] {
        assert_eq!(r["error_code"], 200, "{r}");
    }
    assert_eq!(reports[10]["error_code"], 429, "{}", reports[10]);
    assert_eq!(reports[10]["retry_after_ms"], 20, "{}", reports[10]);
    let (admitted, _, full) = holds(&gw).await;
    assert_eq!(admitted + full, 0.0, "nothing held, no seat asked for");
    // A stream opened on the empty budget: its open is held for one record's tokens, then
    // its first record is written and its second, 20 ms short again, reported 429 at once.
    let reader = stream_records(gw.addr, 2);
    held(&gw, 1).await;
    gw.advance_ms(20);
    let reports = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("every report after the open's hold")
        .expect("reader");
    let codes: Vec<_> = reports.iter().map(|r| r["error_code"].clone()).collect();
    assert_eq!(codes, vec![json!(200), json!(429)], "{reports:?}");
    gw.shutdown().await;
}

/// Sends a request's head and the first half of its body.
async fn half_upload(addr: std::net::SocketAddr, body: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt as _;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/topics/test.hold/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream
        .write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .expect("half");
    stream
}

/// The answer read before the rest of the body is sent (real time, bounded: a refusal is
/// answered at once).
async fn answer_before_the_rest(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("answered before its body ended")
        .expect("read");
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// A refusal stays cheap with `[wait]`: a request short of tokens takes its seat at the early
/// check and keeps it while its body arrives; a request finding no seat hears its 429 before
/// it uploads its body, and a seat is given back when its request goes away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_finding_no_seat_hears_429_before_it_uploads() {
    let (_cluster, gw, url) = emptied(250, 1).await;
    let body = records(1).to_string();
    // Short of tokens (20 ms): its seat is taken before its body is read.
    let slow = half_upload(gw.addr, &body).await;
    held(&gw, 1).await;
    // The tenant's one seat is taken: refused before the rest of its body is sent.
    let mut refused = half_upload(gw.addr, &body).await;
    let answer = answer_before_the_rest(&mut refused).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("\"retry_after_ms\":20"), "{answer}");
    // The slow client goes away: its seat is given back.
    drop(slow);
    held(&gw, 0).await;
    let next = spawn_post(url.clone(), records(1));
    held(&gw, 1).await;
    gw.advance_ms(20);
    let (s, a) = next.await.expect("task");
    assert_eq!(s, 200, "{a}");
    assert_eq!(holds(&gw).await, (1.0, 0.0, 1.0));
    gw.shutdown().await;
}

/// Seats are bounded per tenant (and in all): a request finding none is refused at once; two
/// held requests wanting the same token are decided again, and one that cannot be admitted
/// within max_ms is refused after its hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_are_bounded_in_seats_and_in_time() {
    let (_cluster, gw, url) = emptied(30, 2).await;
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
    assert_eq!(holds(&gw).await, (1.0, 1.0, 1.0));
    assert_eq!(
        sample(&scrape(&gw).await, "floodgate_admission_held_requests"),
        0.0,
        "seats given back"
    );
    gw.shutdown().await;
}

/// check-config and the admin API say what a burst below its rate costs clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_below_its_rate_is_warned_by_the_admin_api() {
    let (_cluster, gw) = gateway(0, 8).await;
    let (s, body) = admin_get(&gw, "/admin/tenants/acme").await;
    assert_eq!(s, 200, "{body}");
    let warning = &body["warnings"][0];
    assert_eq!(warning["field"], "records_burst", "{body}");
    let detail = warning["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("about 20% of its rate"), "{detail}");
    // Raised to one second of its rate: no warning.
    let (s, body) = admin_patch(
        &gw,
        "/admin/tenants/acme",
        json!({"records_per_sec": 50, "records_burst": 50}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert!(body.get("warnings").is_none(), "{body}");
    gw.shutdown().await;
}
