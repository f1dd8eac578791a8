//! Content-coded bodies on every wire format reach Kafka (Tansu) byte for byte: /v1 JSON,
//! NDJSON and base64 values, Confluent v2, v3 single records, streams and `records:batch`,
//! each in gzip, deflate (zlib and raw), zstd, snappy (framed and one raw block), gzip under
//! zstd, and identity. A real client too: Python's `requests` and `urllib3`, posting gzip and
//! zstd (PyPI's `zstandard`).

use std::io::Write as _;
use std::net::TcpStream;

use crate::common::codings::{Coded, ALL};
use crate::common::v3::{read_head, ReportReader};
use crate::common::*;
use base64::Engine as _;
use serde_json::json;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A record's key and value as they must reach Kafka.
type Pair = (Vec<u8>, Vec<u8>);

/// Binary bytes no JSON string could carry, different for every record.
fn binary(seed: usize, n: usize) -> Vec<u8> {
    let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// A JSON value's text, as it appears in the body and must reach Kafka.
fn json_text(tag: &str, i: usize) -> String {
    format!(
        r#"{{"tag":"{tag}","i":{i},"msg":"héllo wörld ✓ {}","n":[1, 2.50, -3e2]}}"#,
        "repeat ".repeat(20 + i)
    )
}

/// One wire format's request carrying `pairs`' records (made from `tag`): path, content type,
/// body, and the pairs it must write.
struct Request {
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
    expect: Vec<Pair>,
    /// Sent chunked, in several pieces (a v3 stream).
    stream: bool,
}

impl Request {
    /// A request sent whole (not a stream).
    fn whole(path: String, content_type: &'static str, body: Vec<u8>, expect: Vec<Pair>) -> Self {
        Self {
            path,
            content_type,
            body,
            expect,
            stream: false,
        }
    }
}

fn requests(topic: &str, tag: &str) -> Vec<Request> {
    let keys: Vec<String> = (0..3).map(|i| format!("{tag}-r{i}")).collect();
    let v1_json = {
        let items: Vec<String> = (0..3)
            .map(|i| format!(r#"{{"key":"{}","value":{}}}"#, keys[i], json_text(tag, i)))
            .collect();
        format!(r#"{{"records":[{}]}}"#, items.join(","))
    };
    let ndjson: String = (0..3)
        .map(|i| {
            format!(
                "{{\"key\":\"{}\",\"value\":{}}}\n",
                keys[i],
                json_text(tag, i)
            )
        })
        .collect();
    let text_pairs = |k: &[String]| -> Vec<Pair> {
        (0..3)
            .map(|i| (k[i].clone().into_bytes(), json_text(tag, i).into_bytes()))
            .collect()
    };
    let bin_pairs: Vec<Pair> = (0..3)
        .map(|i| (keys[i].clone().into_bytes(), binary(i + tag.len(), 300 + i)))
        .collect();
    let v1_b64 = json!({"records": bin_pairs.iter().map(|(k, v)| json!({
        "key": String::from_utf8_lossy(k), "value_b64": b64(v)})).collect::<Vec<_>>()});
    let v2 = json!({"records": bin_pairs.iter().map(|(k, v)| json!({
        "key": b64(k), "value": b64(v)})).collect::<Vec<_>>()});
    let v3_record = |(k, v): &Pair| json!({"key": {"type": "BINARY", "data": b64(k)}, "value": {"type": "BINARY", "data": b64(v)}});
    let batch = json!({"entries": bin_pairs.iter().enumerate().map(|(i, p)| {
        let mut e = v3_record(p);
        e["id"] = json!(format!("e{i}"));
        e
    }).collect::<Vec<_>>()});
    let prefixed = |p: &str, pairs: &[Pair]| -> Vec<Pair> {
        pairs
            .iter()
            .map(|(k, v)| ([p.as_bytes(), k].concat(), v.clone()))
            .collect()
    };
    // Each format's records get their own key prefix, so every record is told apart.
    let with_prefix =
        |p: &str, body: String| body.replace(&format!("\"{tag}-r"), &format!("\"{p}{tag}-r"));
    let v3 = format!("/v3/clusters/c/topics/{topic}");
    // A `/v1` body of the records as JSON text, under the key prefix `p`.
    let v1_text = |p: &str, content_type, body| {
        let path = format!("/v1/topics/{topic}/records");
        let expect = prefixed(p, &text_pairs(&keys));
        Request::whole(
            path,
            content_type,
            with_prefix(p, body).into_bytes(),
            expect,
        )
    };
    vec![
        v1_text("json-", "application/json", v1_json),
        v1_text("nd-", "application/x-ndjson", ndjson),
        Request::whole(
            format!("/v1/topics/{topic}/records?async=true"),
            "application/json",
            with_prefix("b64-", v1_b64.to_string()).into_bytes(),
            prefixed("b64-", &bin_pairs),
        ),
        Request::whole(
            format!("/topics/{topic}"),
            "application/vnd.kafka.binary.v2+json",
            v2.to_string().into_bytes(),
            bin_pairs.clone(),
        ),
        Request::whole(
            format!("{v3}/records"),
            "application/json",
            v3_record(&prefixed("one-", &bin_pairs[..1])[0])
                .to_string()
                .into_bytes(),
            prefixed("one-", &bin_pairs[..1]),
        ),
        Request {
            path: format!("{v3}/records"),
            content_type: "application/json",
            body: {
                let p = prefixed("s-", &bin_pairs);
                p.iter()
                    .map(|p| v3_record(p).to_string())
                    .collect::<String>()
                    .into_bytes()
            },
            expect: prefixed("s-", &bin_pairs),
            stream: true,
        },
        Request::whole(
            format!("{v3}/records:batch"),
            "application/json",
            {
                let mut b = batch.clone();
                for (i, e) in b["entries"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    e["key"]["data"] = json!(b64(&[b"bt-", keys[i].as_bytes()].concat()));
                }
                b.to_string().into_bytes()
            },
            prefixed("bt-", &bin_pairs),
        ),
    ]
}

/// A v3 stream sent chunked, its coded body cut in three pieces: the reports' status codes.
fn post_stream(addr: std::net::SocketAddr, path: &str, encoding: &str, body: &[u8]) -> Vec<i64> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Encoding: {encoding}\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("head");
    let third = body.len() / 3 + 1;
    for piece in body.chunks(third) {
        stream
            .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
            .expect("size");
        stream.write_all(piece).expect("piece");
        stream.write_all(b"\r\n").expect("end of piece");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stream.write_all(b"0\r\n\r\n").expect("end");
    let mut reader = std::io::BufReader::new(stream);
    assert_eq!(read_head(&mut reader), 200);
    let mut reports = ReportReader::new(reader);
    let mut codes = Vec::new();
    while let Some(r) = reports.next() {
        codes.push(r["error_code"].as_i64().unwrap_or(-1));
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wire_format_in_every_coding_reaches_kafka_byte_for_byte() {
    let (topic, gw) = on_tansu("test.codings", 1).await;
    let mut expected: Vec<Pair> = Vec::new();
    for (
        c,
        Coded {
            label,
            header,
            encode,
        },
    ) in ALL.iter().enumerate()
    {
        for request in requests(&topic, &format!("c{c}")) {
            let wire = encode(&request.body);
            if request.stream {
                let (addr, path, header) = (gw.addr, request.path.clone(), header.to_string());
                let codes =
                    tokio::task::spawn_blocking(move || post_stream(addr, &path, &header, &wire))
                        .await
                        .expect("stream client");
                assert_eq!(codes, [200, 200, 200], "{label}: stream");
            } else {
                let response = client()
                    .post(format!("http://{}{}", gw.addr, request.path))
                    .bearer_auth(KEY)
                    .header("content-type", request.content_type)
                    .header("content-encoding", *header)
                    .body(wire)
                    .send()
                    .await
                    .expect("sent");
                let status = response.status().as_u16();
                let text = response.text().await.unwrap_or_default();
                assert!(
                    matches!(status, 200 | 202 | 207) && !text.contains("failures\":[{"),
                    "{label} {}: {status} {text}",
                    request.path
                );
            }
            expected.extend(request.expect);
        }
    }
    let got = read_tansu(&topic, 1, expected.len()).await;
    let mut got: Vec<Pair> = got
        .into_iter()
        .map(|c| (c.key.unwrap_or_default(), c.value.unwrap_or_default()))
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        assert!(
            g == e,
            "{:?}: {:?} reached Kafka, {:?} was sent",
            String::from_utf8_lossy(&e.0),
            String::from_utf8_lossy(&g.1),
            String::from_utf8_lossy(&e.1)
        );
    }
    gw.shutdown().await;
}

/// The Python of scripts/clients.sh's venv (urllib3, requests, zstandard).
fn client_python() -> std::path::PathBuf {
    let dir = std::env::var("FLOODGATE_CLIENTS").unwrap_or_else(|_| {
        panic!(
            "FLOODGATE_CLIENTS is not set: run the suite with scripts/test.sh, which makes the \
             clients' folder (or scripts/clients.sh DIR and export it)"
        )
    });
    std::path::PathBuf::from(dir).join("venv/bin/python")
}

/// Python producers as they are written: requests and urllib3 posting bodies their own
/// libraries compressed (gzip, zstd; whole and streamed chunked), the header set by hand; every
/// record reaches Kafka byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_clients_posting_gzip_and_zstd_reach_kafka() {
    let (topic, gw) = on_tansu("test.pyclients", 1).await;
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/coded-client.py");
    let url = format!("http://{}", gw.addr);
    let mut command = std::process::Command::new(client_python());
    command
        .arg(script)
        .args(["--url", &url, "--key", KEY, "--topic", &topic]);
    let stdout = client_output(command, "scripts/coded-client.py").await;
    let mut sent: Vec<Pair> = String::from_utf8_lossy(&stdout)
        .lines()
        .map(|line| {
            let r: serde_json::Value = serde_json::from_str(line).expect("a record line");
            let text = |f: &str| r[f].as_str().expect("text").as_bytes().to_vec();
            (text("key"), text("value"))
        })
        .collect();
    assert_eq!(sent.len(), 20);
    let mut got: Vec<Pair> = read_tansu(&topic, 1, sent.len())
        .await
        .into_iter()
        .map(|c| (c.key.unwrap_or_default(), c.value.unwrap_or_default()))
        .collect();
    got.sort();
    sent.sort();
    assert!(got == sent, "{got:?}");
    gw.shutdown().await;
}
