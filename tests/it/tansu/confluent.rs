//! Confluent REST Proxy clients switch by changing a URL: v2 and v3 requests written from
//! Confluent's API reference examples are answered in Confluent's shapes, and what they carry
//! reaches Kafka (Tansu) byte for byte. Streams report every record in order; budgets apply per
//! record inside a stream.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::common::v3::{open_stream, read_reports, stream_chunks, write_chunk};
use crate::common::*;
use base64::Engine as _;
use serde_json::{json, Value};

/// A POST of `body` with the test key as `content_type`, asking for `accept` when given:
/// status, headers, the answer's text.
async fn post_accepting(
    url: &str,
    content_type: &str,
    accept: Option<&str>,
    body: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut headers = vec![("content-type", content_type)];
    if let Some(accept) = accept {
        headers.push(("accept", accept));
    }
    post_text(url, KEY, &headers, body.to_string()).await
}

/// [`post_accepting`] with no `Accept`.
async fn post(
    url: &str,
    content_type: &str,
    body: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    post_accepting(url, content_type, None, body).await
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// v2, both embedded formats, from the API reference's examples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_binary_and_json_records_reach_kafka() {
    let (topic, gw) = on_tansu("test.v2", 2).await;
    let base = format!("http://{}", gw.addr);

    // POST /topics/test with application/vnd.kafka.binary.v2+json.
    let body = json!({"records": [
        {"key": b64(b"key"), "value": b64(&[0, 1, 2, 255])},
        {"value": b64(b"logs"), "partition": 1},
    ]})
    .to_string();
    let (s, h, text) = post_accepting(
        &format!("{base}/topics/{topic}"),
        "application/vnd.kafka.binary.v2+json",
        Some("application/vnd.kafka.v2+json"),
        &body,
    )
    .await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(h["content-type"], "application/vnd.kafka.v2+json");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(answer["key_schema_id"], Value::Null);
    assert_eq!(answer["value_schema_id"], Value::Null);
    let offsets = answer["offsets"].as_array().expect("offsets");
    assert_eq!(offsets.len(), 2);
    assert_eq!(offsets[1]["partition"], 1);
    assert_eq!(offsets[0]["error_code"], Value::Null);
    assert_eq!(offsets[0]["error"], Value::Null);

    // POST /topics/test/partitions/0 with the json embedded format: the text byte for byte.
    let body = r#"{"records":[{"value":{"foo": 1.50, "bar":[1]}},{"key":"k2","value":"s","partition":1}]}"#;
    let (s, _, text) = post(
        &format!("{base}/topics/{topic}/partitions/0"),
        "application/vnd.kafka.json.v2+json",
        body,
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(answer["offsets"][0]["partition"], 0, "the path's partition");
    assert_eq!(
        answer["offsets"][1]["partition"], 1,
        "the record's own wins"
    );

    let got = read_tansu(&topic, 2, 4).await;
    type Seen = (i32, Option<Vec<u8>>, Option<Vec<u8>>);
    let values: Vec<Seen> = got
        .iter()
        .map(|c| (c.partition, c.key.clone(), c.value.clone()))
        .collect();
    assert!(
        values.contains(&(1, None, Some(b"logs".to_vec()))),
        "{values:?}"
    );
    assert!(
        values
            .iter()
            .any(|(_, k, v)| k.as_deref() == Some(b"key")
                && v.as_deref() == Some(&[0, 1, 2, 255][..]))
    );
    assert!(values.contains(&(0, None, Some(br#"{"foo": 1.50, "bar":[1]}"#.to_vec()))));
    assert!(values.contains(&(1, Some(br#""k2""#.to_vec()), Some(br#""s""#.to_vec()))));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_refusals_use_confluents_codes() {
    let (_cluster, gw) = gateway_with_records("test.v2r", 1, 1).await;
    let url = format!("http://{}/topics/test.v2r", gw.addr);
    let one = r#"{"records":[{"value":"YQ=="}]}"#.to_string();
    let bin = "application/vnd.kafka.binary.v2+json";
    // An Accept floodgate cannot serve: 406, no body.
    let (s, _, text) = post_accepting(&url, bin, Some("text/html"), &one).await;
    assert_eq!((s, text.as_str()), (406, ""));
    // Schema formats and unknown types: 415 with a message that says why.
    let (s, _, text) = post(&url, "application/vnd.kafka.avro.v2+json", &one).await;
    assert_eq!(s, 415);
    assert!(
        text.contains("Schema Registry") && text.contains("\"error_code\":41501"),
        "{text}"
    );
    let (s, _, _) = post(&url, "text/plain", &one).await;
    assert_eq!(s, 415);
    // Empty records, an unknown field: 422.
    let (s, _, text) = post(&url, bin, r#"{"records":[{"value":"YQ==","colour":1}]}"#).await;
    assert_eq!(s, 422, "{text}");
    assert!(text.contains("\"error_code\":422"), "{text}");
    // Unknown topic: 404 40401; unknown partition: 404 40402.
    let (s, _, text) = post(&format!("http://{}/topics/test.nope", gw.addr), bin, &one).await;
    assert_eq!(s, 404);
    assert!(text.contains("40401"), "{text}");
    let (s, _, text) = post(&format!("{url}/partitions/7"), bin, &one).await;
    assert_eq!(s, 404);
    assert!(text.contains("40402"), "{text}");
    // Over budget: 429 in Confluent's envelope, with what Confluent never sends.
    let (s, _, _) = post(&url, bin, &one).await;
    assert_eq!(s, 200);
    let (s, h, text) = post(&url, bin, &one).await;
    assert_eq!(s, 429);
    assert!(
        text.contains("\"error_code\":42901") && text.contains("retry_after_ms"),
        "{text}"
    );
    assert_eq!(h["retry-after"], "1");
    assert!(h.get("ratelimit").is_some() && h.get("ratelimit-policy").is_some());
    gw.shutdown().await;
}

/// v3: the cluster list, one record of every type, and a batch, under both prefixes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_records_and_batches_reach_kafka() {
    let topic = tansu_topic("test.v3", 1).await;
    let mut cfg = config(&tansu());
    cfg.compat.cluster_id = Some("lkc-floodgate".into());
    let gw = Gateway::start(cfg).await;
    let base = format!("http://{}", gw.addr);

    let clusters: Value = client()
        .get(format!("{base}/v3/clusters"))
        .basic_auth("key-id", Some(KEY))
        .send()
        .await
        .expect("clusters")
        .json()
        .await
        .expect("json");
    assert_eq!(clusters["data"][0]["cluster_id"], "lkc-floodgate");
    assert_eq!(clusters["data"][0]["kind"], "KafkaCluster");
    assert!(clusters["data"][0]["metadata"]["self"]
        .as_str()
        .unwrap_or("")
        .ends_with("/v3/clusters/lkc-floodgate"));

    let record = json!({
        "partition_id": 0,
        "headers": [{"name": "Header-1", "value": b64(b"h1")}, {"name": "Header-1", "value": b64(b"again")}],
        "key": {"type": "STRING", "data": "my-key \u{e9}"},
        "value": {"type": "BINARY", "data": b64(&[9, 8, 7])},
        "timestamp": "2026-11-30T12:00:00.250Z",
    });
    let (s, _, text) = post(
        &format!("{base}/kafka/v3/clusters/lkc-floodgate/topics/{topic}/records"),
        "application/json",
        &record.to_string(),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let report: Value = serde_json::from_str(text.trim_end()).expect("one report");
    assert_eq!(report["error_code"], 200);
    assert_eq!(report["cluster_id"], "lkc-floodgate");
    assert_eq!(report["topic_name"], topic.as_str());
    assert_eq!(
        report["key"],
        json!({"type": "STRING", "size": "my-key é".len()})
    );
    assert_eq!(report["value"], json!({"type": "BINARY", "size": 3}));

    let batch = json!({"entries": [
        {"id": "a-1", "value": {"type": "JSON", "data": {"n": 1.0}}},
        {"id": "b_2", "key": {"type": "BINARY", "data": b64(b"k")}, "value": {"type": "STRING", "data": "two"}},
    ]});
    let (s, _, text) = post(
        &format!("{base}/v3/clusters/any-id/topics/{topic}/records:batch"),
        "application/json",
        &batch.to_string(),
    )
    .await;
    assert_eq!(s, 207, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(listed_ids(&answer, "successes"), vec!["a-1", "b_2"]);
    assert_eq!(answer["failures"], json!([]));

    let got = read_tansu(&topic, 1, 3).await;
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0].key.as_deref(), Some("my-key é".as_bytes()));
    assert_eq!(got[0].value.as_deref(), Some(&[9, 8, 7][..]));
    assert_eq!(
        got[0].headers,
        vec![
            ("Header-1".to_string(), b"h1".to_vec()),
            ("Header-1".to_string(), b"again".to_vec())
        ]
    );
    assert_eq!(got[0].timestamp, Some(1_796_040_000_250));
    assert_eq!(got[1].value.as_deref(), Some(&br#"{"n":1.0}"#[..]));
    assert_eq!(got[2].value.as_deref(), Some(&b"two"[..]));

    // Batch rules: distinct ids of the allowed characters, 1 to batch_max_entries entries.
    for bad in [
        json!({"entries": [{"id": "x", "value": {"type": "JSON", "data": 1}}, {"id": "x", "value": {"type": "JSON", "data": 2}}]}),
        json!({"entries": [{"id": "no spaces", "value": {"type": "JSON", "data": 1}}]}),
        json!({"entries": []}),
        json!({"entries": (0..11).map(|i| json!({"id": format!("e{i}"), "value": {"type": "JSON", "data": i}})).collect::<Vec<_>>()}),
    ] {
        let (s, _, text) = post(
            &format!("{base}/v3/clusters/c/topics/{topic}/records:batch"),
            "application/json",
            &bad.to_string(),
        )
        .await;
        assert_eq!(s, 422, "{bad}: {text}");
        assert!(text.contains("42208"), "{text}");
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_a_thousand_records_is_reported_in_order() {
    let (topic, gw) = on_tansu("test.stream", 2).await;
    let (addr, path) = (gw.addr, format!("/v3/clusters/c/topics/{topic}/records"));
    let records = (0..1000).map(|i| {
        json!({"key": {"type": "STRING", "data": format!("k{i}")}, "value": {"type": "JSON", "data": {"i": i}}})
            .to_string()
            .into_bytes()
    });
    let reports = tokio::task::spawn_blocking(move || stream_chunks(addr, &path, records))
        .await
        .expect("client");
    assert_eq!(reports.len(), 1000);
    assert!(
        reports.iter().all(|r| r["error_code"] == 200),
        "{:?}",
        reports.iter().find(|r| r["error_code"] != 200)
    );
    let got = read_tansu(&topic, 2, 1000).await;
    assert_eq!(got.len(), 1000);
    // Every report names where its record is, and the record there is the one it reports.
    for (i, r) in reports.iter().enumerate() {
        let (p, o) = (
            r["partition_id"].as_i64().unwrap_or(-1),
            r["offset"].as_i64().unwrap_or(-1),
        );
        let c = got
            .iter()
            .find(|c| i64::from(c.partition) == p && c.offset == o)
            .unwrap_or_else(|| panic!("report {i}: nothing at {p}/{o}"));
        assert_eq!(c.key.as_deref(), Some(format!("k{i}").as_bytes()));
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_stream_budgets_apply_per_record_and_bad_json_ends_it() {
    let (cluster, gw) = gateway_with_records("test.s", 10, 5).await;
    let addr = gw.addr;
    let reports = tokio::task::spawn_blocking(move || {
        let (mut stream, mut reader) = open_stream(addr, "/v3/clusters/c/topics/test.s/records");
        for i in 0..8 {
            let r = json!({"value": {"type": "STRING", "data": format!("r{i}")}});
            write_chunk(&mut stream, r.to_string().as_bytes()).expect("write");
        }
        // A malformed record, then a valid one that must never be written.
        write_chunk(
            &mut stream,
            br#"{"value": {"type": "STRING", "data": "broken"#,
        )
        .expect("write");
        write_chunk(&mut stream, b"]}").expect("write");
        let _ = write_chunk(
            &mut stream,
            br#"{"value":{"type":"STRING","data":"after"}}"#,
        );
        let _ = stream.write_all(b"0\r\n\r\n");
        read_reports(&mut reader)
    })
    .await
    .expect("client");
    let codes: Vec<i64> = reports
        .iter()
        .map(|r| r["error_code"].as_i64().unwrap_or(0))
        .collect();
    assert_eq!(
        codes,
        vec![200, 200, 200, 200, 200, 429, 429, 429, 400],
        "{reports:?}"
    );
    assert!(reports[5]["retry_after_ms"]
        .as_u64()
        .is_some_and(|ms| ms > 0));
    gw.shutdown().await;
    let got = read_all(&cluster.bootstrap_servers(), "test.s", 1, 5).await;
    let values = value_texts(&got);
    assert_eq!(values, vec!["r0", "r1", "r2", "r3", "r4"]);
}

/// A client that never reads its reports: floodgate stops reading its stream once the queue
/// of unsettled records and the socket's buffers are full, so what it holds stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_reports_are_not_read_is_not_read_either() {
    let (_cluster, gw) = gateway_on_mock("test.nr", Time::Real, |cfg| {
        cfg.compat.stream_max_unsettled = 4;
    })
    .await;
    let addr = gw.addr;
    let admitted = |text: &str| -> f64 {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(
                    "floodgate_tenant_records_total{tenant=\"acme\",outcome=\"admitted\"} ",
                )
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let (stream, _reader) = tokio::task::spawn_blocking(move || {
        open_stream(addr, "/v3/clusters/c/topics/test.nr/records")
    })
    .await
    .expect("open");
    let writer = std::thread::spawn(move || {
        let mut stream = stream;
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let record = json!({"value": {"type": "STRING", "data": "x".repeat(500)}}).to_string();
        let mut sent = 0u64;
        while write_chunk(&mut stream, record.as_bytes()).is_ok() {
            sent += 1;
            if sent >= 2_000_000 {
                break;
            }
        }
        sent
    });
    // Let the writer run into the wall (the socket buffers of both sides fill with reports
    // first), then watch that nothing more is admitted.
    let scrape = || async { admitted(&crate::common::exposition::scrape(&gw).await) };
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut last, mut still) = (scrape().await, 0);
    while still < 6 {
        assert!(Instant::now() < deadline, "admission never stopped: {last}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = scrape().await;
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
    assert!(last > 0.0, "records were admitted at first");
    let sent = tokio::task::spawn_blocking(move || writer.join().expect("writer"))
        .await
        .expect("join");
    assert!(
        sent < 2_000_000,
        "the writer was stopped after {sent} records"
    );
    assert_eq!(
        scrape().await,
        last,
        "nothing more was read while the reports waited"
    );
    gw.shutdown().await;
}

/// Confluent's `records:batch` answers an entry that cannot be produced in `failures` (207)
/// and writes the others: Confluent's batch example with its second entry's BINARY `data` a
/// number instead of base64 text. Before, the whole batch was refused 422 and nothing written.
/// A keyed retry replays the same 207; a batch whose every entry failed writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_invalid_entries_answers_207_and_writes_the_others() {
    let (topic, gw) = on_tansu("test.v3f", 1).await;
    let url = format!(
        "http://{}/v3/clusters/c/topics/{topic}/records:batch",
        gw.addr
    );
    let batch = json!({"entries": [
        {"id": "1", "value": {"type": "JSON", "data": {"foo": "bar"}}},
        {"id": "2", "value": {"type": "BINARY", "data": 12}},
        {"id": "3", "value": {"type": "STRING", "data": "three"}},
        {"id": "4", "key": {"type": "BINARY", "data": "not base64!"}, "value": {"type": "STRING", "data": "x"}},
        {"id": "5", "value": {"type": "AVROX", "data": 1}},
    ]})
    .to_string();
    let send = |key: &'static str| {
        let (url, batch) = (url.clone(), batch.clone());
        async move {
            let headers = [
                ("content-type", "application/json"),
                ("idempotency-key", key),
            ];
            let (status, headers, text) = post_text(&url, KEY, &headers, batch).await;
            (status, headers.contains_key("idempotent-replayed"), text)
        }
    };
    let (s, replayed, text) = send("batch-f-1").await;
    assert_eq!((s, replayed), (207, false), "{text}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(listed_ids(&answer, "successes"), ["1", "3"]);
    assert_eq!(listed_ids(&answer, "failures"), ["2", "4", "5"]);
    let failures = answer["failures"].as_array().expect("failures");
    assert!(failures.iter().all(|f| f["error_code"] == 400), "{text}");
    assert_eq!(
        failures[0]["message"],
        "record 1: value: data must be a string for type BINARY"
    );
    assert!(failures[1]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("record 3: key.data is not valid base64")));
    assert!(answer["successes"][1]["offset"].is_i64(), "{text}");
    // The same key again: the answer as it was sent, not written twice.
    let (s, replayed, again) = send("batch-f-1").await;
    assert_eq!((s, replayed, again.as_str()), (207, true, text.as_str()));
    // Every entry failed: 207, all of them in failures, nothing written.
    let none = json!({"entries": [
        {"id": "a", "value": {"type": "BINARY", "data": 1}},
        {"id": "b", "value": {"type": "BINARY", "data": "%%%"}},
    ]});
    let (s, _, text) = post(&url, "application/json", &none.to_string()).await;
    assert_eq!(s, 207, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(answer["successes"], json!([]));
    assert_eq!(answer["failures"].as_array().map(Vec::len), Some(2));
    // Id rules still apply to the whole batch, as kafka-rest checks them first.
    let twice = json!({"entries": [
        {"id": "x", "value": {"type": "BINARY", "data": 1}},
        {"id": "x", "value": {"type": "JSON", "data": 2}},
    ]});
    let (s, _, text) = post(&url, "application/json", &twice.to_string()).await;
    assert_eq!(s, 422, "{text}");
    assert!(text.contains("42208"), "{text}");

    let got = read_tansu(&topic, 1, 2).await;
    let values: Vec<&[u8]> = got
        .iter()
        .map(|c| c.value.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(values, vec![&br#"{"foo":"bar"}"#[..], b"three"], "{got:?}");
    gw.shutdown().await;
}

/// kafka-rest validates a v2 body's `records` as not empty: 422 (error_code 422), where
/// floodgate answered 400/40001; `/v1`'s answer to an empty list does not change. REST Proxy
/// v1's content types (kafka-rest's Node client sends them) are served with v1's answer;
/// v1 Avro is refused naming what to send; every Confluent 415 names its own content types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_empty_records_v1_content_types_and_per_api_415s() {
    let (topic, gw) = on_tansu("test.v2e", 1).await;
    let base = format!("http://{}", gw.addr);
    let v2 = format!("{base}/topics/{topic}");
    for content_type in [
        "application/vnd.kafka.binary.v2+json",
        "application/vnd.kafka.json.v2+json",
    ] {
        let (s, h, text) = post(&v2, content_type, r#"{"records":[]}"#).await;
        assert_eq!(s, 422, "{text}");
        assert_eq!(h["content-type"], "application/vnd.kafka.v2+json");
        let answer: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(answer["error_code"], 422, "{text}");
        assert!(answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("records must not be empty")));
    }
    let (s, _, text) = post(
        &format!("{base}/v1/topics/{topic}/records"),
        "application/json",
        r#"{"records":[]}"#,
    )
    .await;
    assert_eq!(s, 400, "{text}");
    assert!(text.contains("\"error\":\"malformed_body\""), "{text}");

    // v1, as kafka-rest's v1 API reference's example (binary, then json embedded).
    let (s, h, text) = post_accepting(
        &v2,
        "application/vnd.kafka.binary.v1+json",
        Some("application/vnd.kafka.v1+json, application/vnd.kafka+json, application/json"),
        &json!({"records": [{"key": "a2V5", "value": "dmFsdWU="}, {"value": "dmFsdWU="}]})
            .to_string(),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(h["content-type"], "application/vnd.kafka.v1+json");
    let answer: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(answer["offsets"].as_array().map(Vec::len), Some(2));
    assert_eq!(answer["offsets"][0]["partition"], 0);
    assert!(answer["offsets"][1]["offset"].is_i64());
    assert_eq!(answer["offsets"][0]["error_code"], Value::Null);
    assert_eq!(answer["key_schema_id"], Value::Null);
    let (s, _, text) = post(
        &format!("{v2}/partitions/0"),
        "application/vnd.kafka.json.v1+json",
        r#"{"records":[{"value":{"v":1}}]}"#,
    )
    .await;
    assert_eq!(s, 200, "{text}");
    // No embedded format named: v1 meant binary.
    let (s, _, text) = post(
        &v2,
        "application/vnd.kafka.v1+json",
        r#"{"records":[{"value":"Yg=="}]}"#,
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let got = read_tansu(&topic, 1, 4).await;
    let values: Vec<&[u8]> = got
        .iter()
        .map(|c| c.value.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(
        values,
        vec![&b"value"[..], b"value", br#"{"v":1}"#, b"b"],
        "{got:?}"
    );
    assert_eq!(got[0].key.as_deref(), Some(&b"key"[..]));

    // 415s: each names what its own route takes, none gives /v1's advice.
    let one = r#"{"records":[{"value":"YQ=="}]}"#.to_string();
    let (s, _, text) = post(&v2, "application/vnd.kafka.avro.v1+json", &one).await;
    assert_eq!(s, 415, "{text}");
    assert!(
        text.contains("application/vnd.kafka.avro.v2+json") && text.contains("41501"),
        "{text}"
    );
    let refusals = [
        (
            v2.clone(),
            "text/plain",
            "application/vnd.kafka.binary.v2+json",
        ),
        (
            v2.clone(),
            "application/vnd.kafka.protobuf.v2+json",
            "application/vnd.kafka.json.v2+json",
        ),
        (
            format!("{base}/v3/clusters/c/topics/{topic}/records:batch"),
            "text/plain",
            "send the batch as application/json",
        ),
        (
            format!("{base}/v3/clusters/c/topics/{topic}/records"),
            "application/x-ndjson",
            "send records as application/json",
        ),
    ];
    for (url, content_type, names) in refusals {
        let (s, _, text) = post(&url, content_type, &one).await;
        assert_eq!(s, 415, "{url} {content_type}: {text}");
        let message = serde_json::from_str::<Value>(&text).expect("json")["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(message.contains(names), "{message}");
        assert!(
            message.contains(content_type),
            "names what was sent: {message}"
        );
        assert!(
            !message.contains("application/x-ndjson or")
                && !message.contains("use application/json"),
            "no /v1 advice: {message}"
        );
    }
    gw.shutdown().await;
}
