//! Bodies are decoded while they arrive: a chunked upload that can no longer be admitted is
//! answered at once, and the rest of it is never read.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn head(topic: &str, content_type: &str) -> String {
    format!(
        "POST /v1/topics/{topic}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// Whatever the server has answered so far, waiting at most `wait`.
async fn answer_within(stream: &mut TcpStream, wait: Duration) -> String {
    let mut buf = vec![0u8; 8192];
    match tokio::time::timeout(wait, stream.read(&mut buf)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        _ => String::new(),
    }
}

/// A 7 MiB chunked upload from a tenant whose bytes burst is 2 MiB: the 413 comes before the
/// client has sent 3 MiB, the connection is closed, and nothing reaches Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_chunked_upload_is_refused_before_it_is_sent() {
    let (cluster, gw) = gateway_with_bytes("test.upload", 1024 * 1024, 2 * 1024 * 1024).await;
    // What is counted sent is what the kernel took: a small send buffer keeps that near what
    // the gateway read (autotuned, the buffers held 1.4 MiB more on a loaded machine, and a CI
    // run counted 3.59 MB sent before the 413).
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_send_buffer_size(64 * 1024).expect("send buffer");
    let mut stream = socket.connect(gw.addr).await.expect("connect");
    stream
        .write_all(head("test.upload", "application/json").as_bytes())
        .await
        .expect("head");
    stream
        .write_all(&chunk(b"{\"records\":["))
        .await
        .expect("open");
    let record = format!("{{\"value\":\"{}\"}}", "x".repeat(1000));
    let mut sent = 0usize;
    let mut answer = String::new();
    for i in 0..7_000 {
        let sep = if i == 0 { "" } else { "," };
        let piece = chunk(format!("{sep}{record}").as_bytes());
        match stream.write_all(&piece).await {
            Ok(()) => sent += piece.len(),
            Err(_) => break, // the server closed the connection
        }
        if i % 64 == 0 {
            answer = answer_within(&mut stream, Duration::from_millis(1)).await;
            if !answer.is_empty() {
                break;
            }
        }
    }
    if answer.is_empty() {
        answer = answer_within(&mut stream, Duration::from_secs(5)).await;
    }
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("exceeds_burst"), "{answer}");
    assert!(
        sent < 3 * 1024 * 1024,
        "the client sent {sent} bytes before the answer"
    );
    let (s, _, _) = post_json(
        &gw.url("test.upload"),
        KEY,
        &json!({"records":[{"value":"ok"}]}),
    )
    .await;
    assert_eq!(s, 200);
    gw.shutdown().await;
    let got = read_all(&cluster.bootstrap_servers(), "test.upload", 1, 1).await;
    assert_eq!(got.len(), 1, "only the small request is in Kafka");
}

/// An NDJSON upload of 2,000 records from a tenant with a 2,000-record burst waits for more;
/// record 2,001 gets the 413 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_ndjson_upload_is_answered_at_the_record_that_cannot_fit() {
    let (_cluster, gw) = gateway_with_records("test.ndjson", 1000, 2000).await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream
        .write_all(head("test.ndjson", "application/x-ndjson").as_bytes())
        .await
        .expect("head");
    let lines: String = (0..2000).map(|i| format!("{{\"value\":{i}}}\n")).collect();
    for part in lines.as_bytes().chunks(4096) {
        stream.write_all(&chunk(part)).await.expect("records");
    }
    let nothing = answer_within(&mut stream, Duration::from_millis(300)).await;
    assert_eq!(
        nothing, "",
        "2,000 records fit: the server waits for the rest"
    );
    let started = Instant::now();
    stream
        .write_all(&chunk(b"{\"value\":2000}\n"))
        .await
        .expect("record 2001");
    let answer = answer_within(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("2001 records"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let metrics = crate::common::exposition::scrape(&gw).await;
    assert!(
        metrics.contains("floodgate_uploads_cut_short_total{reason=\"exceeds_burst\"} 1"),
        "{metrics}"
    );
    gw.shutdown().await;
}

/// A chunked upload whose records outrun the bucket (not the burst) gets a 429 with the wait
/// for the records read so far, and nothing is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_upload_over_the_bucket_gets_429_mid_stream() {
    let (_cluster, gw) = gateway_with_records("test.bucket", 100, 100).await;
    let url = gw.url("test.bucket");
    let sixty: Vec<_> = (0..60).map(|i| json!({"value": i})).collect();
    let (s, _, _) = post_json(&url, KEY, &json!({ "records": sixty })).await;
    assert_eq!(s, 200);
    // 40 tokens left; a chunked upload of 50 records is refused when the 41st arrives.
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream
        .write_all(head("test.bucket", "application/x-ndjson").as_bytes())
        .await
        .expect("head");
    for i in 0..50 {
        let _ = stream
            .write_all(&chunk(format!("{{\"value\":{i}}}\n").as_bytes()))
            .await;
    }
    let answer = answer_within(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("\"reason\":\"tenant_records\""), "{answer}");
    // 41 records wanted, 40 there: one more token at 100/s is 10 ms.
    assert!(answer.contains("\"retry_after_ms\":10"), "{answer}");
    let (_, h, _) = post_json(&url, KEY, &json!({"records":[{"value":"x"}]})).await;
    assert_eq!(
        h["ratelimit"], "\"tenant-records\";r=39;t=1",
        "the refusal charged nothing"
    );
    gw.shutdown().await;
}

/// A gateway whose tenant may admit 1 record at once and owe 1 ms of unpaid work, on a clock
/// that does not move unless stepped.
async fn one_record_one_unpaid_ms() -> (Cluster, Gateway) {
    gateway_on_mock("test.up", Time::Manual, |cfg| {
        limit_records(cfg, 1, 1);
        cfg.schema_registry.tenant_unpaid_work_ms_per_sec = 1;
        cfg.schema_registry.tenant_unpaid_work_ms_burst = 1;
    })
    .await
}

/// Two records of 100 KB: over a burst of 1, refused 413 once both are read.
fn two_large_records() -> serde_json::Value {
    let big = "v".repeat(100_000);
    json!({"records": [{"value": big}, {"value": big}]})
}

/// Reading a body whose request is then refused is owed to the tenant's unpaid work (the
/// bucket the schema step spends), so a tenant whose refusals keep the gateway reading large
/// bodies is refused before the next is read (review 37a of #37: 8 MB bodies refused 413
/// after being read, a core per tenant allowed 1 record a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_read_for_refused_requests_spend_the_tenants_unpaid_work() {
    let (_cluster, gw) = one_record_one_unpaid_ms().await;
    // Two records of 100 KB: over the burst of 1, refused 413 once both are read.
    let body = two_large_records();
    let url = gw.url("test.up");
    let mut answers = Vec::new();
    for _ in 0..6 {
        let (s, _, a) = post_json(&url, KEY, &body).await;
        answers.push((s, a["error"].as_str().unwrap_or_default().to_string()));
    }
    assert_eq!(
        answers[0],
        (413, "exceeds_burst".to_string()),
        "{answers:?}"
    );
    // 200 KB read for nothing is ~0.6 ms of unpaid work: the 1 ms is spent by the second.
    assert_eq!(
        answers[2..]
            .iter()
            .filter(|(s, e)| *s == 429 && e == "schema_busy")
            .count(),
        4,
        "{answers:?}"
    );
    gw.shutdown().await;
}

/// A body that costs more to read than a request may owe (its tenant's unpaid-work burst) is
/// not read on, however it would have ended (review 37a of #37: one 8 MB body in 1-byte chunks
/// took 7.4 s to read before its 413).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_costlier_to_read_than_a_request_may_owe_is_not_read_on() {
    let (_cluster, gw) = gateway_on_mock("test.up", Time::Manual, |cfg| {
        cfg.schema_registry.tenant_unpaid_work_ms_burst = 1;
    })
    .await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let mut sent = head("test.up", "application/json").into_bytes();
    sent.extend(chunk(br#"{"records":[{"value":""#));
    // 3,000 pieces of one byte: ~2.7 ms to take in, more than the 1 ms a request may owe.
    for _ in 0..3_000 {
        sent.extend(chunk(b"x"));
    }
    stream.write_all(&sent).await.expect("write");
    let answer = answer_within(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("cost more to read"), "{answer}");
    gw.shutdown().await;
}

/// A small body (64 KiB declared) in 1-byte HTTP/2 frames from a tenant whose unpaid work is
/// spent is not read to its end: the tenant is asked every few pieces, and the answer is 429
/// before the body is sent (review 38a of #37: such bodies were never asked, 45 ms of CPU
/// each while their tenant owed two minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_body_in_tiny_pieces_is_not_read_for_a_tenant_whose_unpaid_work_is_spent() {
    let (_cluster, gw) = one_record_one_unpaid_ms().await;
    // A 413 of 200 KB read for nothing (~0.6 ms), then one more large body: that one is
    // refused at its first piece, the unpaid work spent.
    let refused = two_large_records();
    let (s, _, a) = post_json(&gw.url("test.up"), KEY, &refused).await;
    assert_eq!(s, 413, "{a}");
    let (s, _, a) = post_json(&gw.url("test.up"), KEY, &refused).await;
    assert_eq!((s, a["error"].as_str()), (429, Some("schema_busy")), "{a}");
    let tcp = TcpStream::connect(gw.addr).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let request =
        axum::http::Request::post(format!("http://{}/v1/topics/test.up/records", gw.addr))
            .header("authorization", format!("Bearer {KEY}"))
            .header("content-type", "application/json")
            .header("content-length", "65536")
            .body(())
            .expect("request");
    let (response, mut body) = client.send_request(request, false).expect("send");
    body.send_data(
        bytes::Bytes::from_static(br#"{"records":[{"value":""#),
        false,
    )
    .expect("send");
    // 300 one-byte frames, far less than the 64 KiB declared: without the looks every few
    // pieces the body is read on, and no answer comes until it ends.
    for _ in 0..300 {
        body.send_data(bytes::Bytes::from_static(b"x"), false)
            .expect("send");
    }
    let response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("answered before the body ended")
        .expect("response");
    assert_eq!(response.status(), 429);
    let mut text = Vec::new();
    let mut answer = response.into_body();
    while let Some(Ok(chunk)) = answer.data().await {
        text.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("schema_busy"), "{text}");
    gw.shutdown().await;
}
