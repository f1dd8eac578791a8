//! The ingest path end to end against a real Kafka-protocol broker (Tansu): records in every
//! format reach Kafka byte for byte, sync answers carry the real offsets, and every refusal
//! leaves Kafka untouched.

use crate::common::*;
use base64::Engine as _;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_records_reach_kafka_intact_with_their_offsets() {
    let (topic, gw) = on_tansu("test.json", 3).await;

    // Raw body so the value's formatting (spaces, key order, 1.50) is what we compare.
    let body = String::from(
        r#"{"records":[
            {"key":"user-1","value":{"b": 1.50, "a":[1,2]},"partition":0,"headers":{"trace":"t1","h2":""}},
            {"key":"user-2","value":"plain \u00e9","partition":2,"timestamp_ms":1700000000123},
            {"key_b64":"AP8=","value_b64":"AAECAw==","partition":2},
            {"value":null,"partition":1}
        ]}"#,
    );
    let (status, headers, answer) = post_raw(&gw.url(&topic), KEY, "application/json", body).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        headers.get("ratelimit-policy").is_none(),
        "no budgets configured, no policy"
    );
    let offsets = answer["offsets"].as_array().expect("offsets").clone();
    assert_eq!(offsets.len(), 4);

    let got = read_tansu(&topic, 3, 4).await;
    assert_eq!(got.len(), 4, "{got:?}");
    let find = |p: i64, o: i64| {
        got.iter()
            .find(|c| i64::from(c.partition) == p && c.offset == o)
            .unwrap_or_else(|| panic!("no record at {p}/{o} in {got:?}"))
    };
    let at = |i: usize| {
        let o = &offsets[i];
        find(
            o["partition"].as_i64().expect("p"),
            o["offset"].as_i64().expect("o"),
        )
    };
    let r0 = at(0);
    assert_eq!(r0.partition, 0);
    assert_eq!(r0.key.as_deref(), Some(&b"user-1"[..]));
    assert_eq!(r0.value.as_deref(), Some(&br#"{"b": 1.50, "a":[1,2]}"#[..]));
    assert_eq!(
        r0.headers,
        vec![
            ("trace".to_string(), b"t1".to_vec()),
            ("h2".to_string(), Vec::new())
        ]
    );
    let r1 = at(1);
    assert_eq!(r1.value.as_deref(), Some(&br#""plain \u00e9""#[..]));
    assert_eq!(r1.timestamp, Some(1_700_000_000_123));
    let r2 = at(2);
    assert_eq!(
        (r2.partition, r2.key.as_deref()),
        (2, Some(&[0u8, 255][..]))
    );
    assert_eq!(r2.value.as_deref(), Some(&[0u8, 1, 2, 3][..]));
    assert!(
        r2.offset > r1.offset,
        "order within a partition is request order"
    );
    assert_eq!(
        at(3).value,
        None,
        "\"value\": null is a Kafka null value (tombstone)"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ndjson_and_async_requests_reach_kafka_in_order() {
    let (topic, gw) = on_tansu("test.ndjson", 1).await;

    let lines: String = (0..50)
        .map(|i| format!("{{\"key\":\"k{i}\",\"value\":{{\"n\":{i}}}}}\n"))
        .collect();
    let (status, _, answer) = post_raw(&gw.url(&topic), KEY, "application/x-ndjson", lines).await;
    assert_eq!(status, 200, "{answer}");
    let first = offsets(&answer, "offset");
    assert!(first.windows(2).all(|w| w[1] == w[0] + 1), "{first:?}");

    let b64 = base64::engine::general_purpose::STANDARD;
    let records: Vec<_> = (50..100)
        .map(|i: u32| json!({"key": format!("k{i}"), "value_b64": b64.encode(i.to_be_bytes())}))
        .collect();
    let (status, _, answer) = post_json(
        &format!("{}?async=true", gw.url(&topic)),
        KEY,
        &json!({ "records": records }),
    )
    .await;
    assert_eq!((status, answer.clone()), (202, json!({"accepted": 50})));
    // A graceful shutdown flushes what was accepted before it returns.
    assert_eq!(gw.shutdown().await.unconfirmed_records, 0);

    let got = read_tansu(&topic, 1, 100).await;
    let keys: Vec<String> = got
        .iter()
        .map(|c| String::from_utf8(c.key.clone().expect("key")).expect("utf8"))
        .collect();
    let expected: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    assert_eq!(keys, expected);
    assert_eq!(got[0].value.as_deref(), Some(&br#"{"n":0}"#[..]));
    assert_eq!(got[99].value.as_deref(), Some(&99u32.to_be_bytes()[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_never_reach_kafka() {
    let topic = tansu_topic("test.refused", 1).await;
    let mut cfg = config(&tansu());
    cfg.server.max_body_bytes = 4096;
    let gw = Gateway::start(cfg).await;
    let url = gw.url(&topic);
    let one = json!({"records":[{"value":1}]});

    let (s, _, a) = post_json(&url, "wrong-key", &one).await;
    assert_eq!((s, a["error"].as_str()), (401, Some("unauthorized")));
    let (s, _, a) = post_json(&gw.url("other.topic"), KEY, &one).await;
    assert_eq!((s, a["error"].as_str()), (403, Some("forbidden_topic")));
    let (s, _, a) = post_json(&gw.url("test.no-such-topic-here"), KEY, &one).await;
    assert_eq!(
        (s, a["error"].as_str()),
        (404, Some("unknown_topic")),
        "{a}"
    );
    let (s, _, a) = post_raw(&url, KEY, "text/plain", "{}").await;
    assert_eq!(
        (s, a["error"].as_str()),
        (415, Some("unsupported_media_type"))
    );
    let (s, _, a) = post_raw(&url, KEY, "application/json", "x".repeat(5000)).await;
    assert_eq!((s, a["error"].as_str()), (413, Some("body_too_large")));
    // One bad record spoils the whole request: the good ones before it are not written.
    let bad = json!({"records":[{"value":1},{"value":2},{"value_b64":"not base64!"}]});
    let (s, _, a) = post_json(&url, KEY, &bad).await;
    assert_eq!((s, a["error"].as_str()), (400, Some("malformed_body")));
    assert!(
        a["detail"].as_str().unwrap_or("").starts_with("record 2:"),
        "{a}"
    );
    let (s, _, a) = post_json(&url, KEY, &json!({"records":[{"value":1,"partition":5}]})).await;
    assert_eq!(
        (s, a["error"].as_str()),
        (404, Some("unknown_partition")),
        "{a}"
    );
    let (s, _, a) = post_raw(
        &url,
        KEY,
        "application/x-ndjson",
        "{\"value\":1}\n{\"value\":\n",
    )
    .await;
    assert_eq!(s, 400);
    assert!(
        a["detail"]
            .as_str()
            .unwrap_or("")
            .starts_with("line 2 (record 1)"),
        "{a}"
    );

    // Then one good request: it must be the only record in the topic.
    let (s, _, a) = post_json(&url, KEY, &json!({"records":[{"value":"the only one"}]})).await;
    assert_eq!(s, 200, "{a}");
    gw.shutdown().await;
    let got = read_tansu(&topic, 1, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].value.as_deref(), Some(&br#""the only one""#[..]));
}

/// Over HTTP/2 a refusal decided before the body is read (a bad key, a topic the tenant may
/// not write) reaches the client with its status and JSON: the small body is read first, so
/// the stream is not reset under the answer (it was, every time, for curl and h2 clients).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_a_refusal_before_the_body_arrives_whole() {
    let (_cluster, gw) = gateway_on_mock("test.h2refuse", Time::Real, |_| {}).await;
    let tcp = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(connection);
    let body = bytes::Bytes::from_static(br#"{"records":[{"value":1}]}"#);
    for (key, topic, status, code) in [
        ("wrong-key-0123456789", "test.h2refuse", 401, "unauthorized"),
        (KEY, "elsewhere.x", 403, "forbidden_topic"),
    ] {
        for _ in 0..5 {
            let mut client = client.clone().ready().await.expect("ready");
            let request =
                axum::http::Request::post(format!("http://{}/v1/topics/{topic}/records", gw.addr))
                    .header("authorization", format!("Bearer {key}"))
                    .header("content-type", "application/json")
                    .header("content-length", body.len().to_string())
                    .body(())
                    .expect("request");
            let (response, mut send) = client.send_request(request, false).expect("send");
            send.send_data(body.clone(), true).expect("body");
            let response = response.await.expect("an answer, not a reset stream");
            assert_eq!(response.status().as_u16(), status);
            let mut body = response.into_body();
            let mut text = Vec::new();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.expect("the answer's body, not a reset");
                let _ = body.flow_control().release_capacity(chunk.len());
                text.extend_from_slice(&chunk);
            }
            let json: serde_json::Value = serde_json::from_slice(&text).expect("JSON");
            assert_eq!(json["error"], code, "{json}");
        }
    }
    gw.shutdown().await;
}
