//! Room in the body budget: a tenant holding less than an equal share of a spent budget has
//! the stalest upload of the tenant holding the most cut for it, rather than being refused.

use std::time::Duration;

use crate::common::exposition::metric;
use crate::common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOPIC: &str = "test.room";
const BUDGET: u64 = 1 << 20;
/// Each hog's body: one record whose value never ends (its last byte is never sent).
const BODY: usize = 256 * 1024;

/// An upload of `BODY` bytes, all but its last sent.
async fn stalled(gw: &Gateway, key: &str) -> TcpStream {
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let head = format!(
        "POST /v1/topics/{TOPIC}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {BODY}\r\n\r\n"
    );
    let opening = r#"{"records":[{"value":""#;
    let mut body = opening.as_bytes().to_vec();
    body.resize(BODY - 1, b'h');
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&body).await.expect("body");
    stream
}

/// Whatever the server answered on `stream` within `wait` (empty if nothing).
async fn answered(stream: &mut TcpStream, wait: Duration) -> String {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(wait, stream.read(&mut buf)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        _ => String::new(),
    }
}

const HOGS: [&str; 4] = ["key-hog-a", "key-hog-a", "key-hog-b", "key-hog-b"];

/// Waits until the hogs' uploads hold the whole budget but 4 bytes.
async fn full(gw: &Gateway) {
    let full = Some((BUDGET - 4) as f64);
    for _ in 0..200 {
        if metric(gw, "floodgate_body_inflight_bytes").await == full {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(metric(gw, "floodgate_body_inflight_bytes").await, full);
}

/// The hog uploads answered now (each must be `429 server_busy`), by index.
async fn cut_hogs(hogs: &mut [TcpStream]) -> Vec<usize> {
    let mut cut = Vec::new();
    for (i, hog) in hogs.iter_mut().enumerate() {
        // The first waits for the answers to come; they are all there after it.
        let wait = if i == 0 { 300 } else { 50 };
        let text = answered(hog, Duration::from_millis(wait)).await;
        if !text.is_empty() {
            assert!(text.starts_with("HTTP/1.1 429"), "{text}");
            assert!(text.contains("\"reason\":\"server_busy\""), "{text}");
            cut.push(i);
        }
    }
    cut
}

/// Review 32 of #37 (F-A): two tenants allowed 1 record a second, each keeping bodies whole
/// but for their last byte, held the whole body budget, and every other tenant was refused
/// `server_busy` until the body timeout. Now a newcomer under an equal share of the budget
/// has one of the heaviest holder's stalled uploads cut for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_under_its_equal_share_gets_room_from_the_heaviest_holders_stalled_upload() {
    let kafka = mock_cluster(&[TOPIC]);
    let mut cfg = config(&kafka.bootstrap_servers());
    cfg.server.max_inflight_body_bytes = BUDGET;
    cfg.server.max_body_bytes = 512 * 1024;
    for (id, key) in [("hog-a", "key-hog-a"), ("hog-b", "key-hog-b")] {
        let mut hog = tenant(id, key, &[TOPIC]);
        hog.records_per_sec = Some(1);
        hog.records_burst = Some(1);
        cfg.tenants.push(hog);
    }
    let gw = Gateway::start(cfg).await;
    // Each hog holds half the budget (its share) with two uploads, all but 4 bytes in all.
    let mut hogs = Vec::new();
    for key in HOGS {
        hogs.push(stalled(&gw, key).await);
    }
    let one = json!({"records": [{"value": "v".repeat(1000)}]});
    full(&gw).await;
    let (s, _, a) = post_json(&gw.url(TOPIC), KEY, &one).await;
    assert_eq!(s, 200, "{a}");
    let cut = cut_hogs(&mut hogs).await;
    assert_eq!(cut.len(), 1);
    let made_room = r#"floodgate_uploads_cut_short_total{reason="made_room"}"#;
    assert_eq!(metric(&gw, made_room).await, Some(1.0));

    // The hog whose upload was cut sends it again, and the budget is full again: a keyed
    // request (checked before its key is claimed) gets room the same way.
    hogs[cut[0]] = stalled(&gw, HOGS[cut[0]]).await;
    full(&gw).await;
    let (s, replayed, a) = post_keyed(&gw.url(TOPIC), KEY, "room-1", &one).await;
    assert_eq!((s, replayed), (200, false), "{a}");
    assert_eq!(cut_hogs(&mut hogs).await.len(), 1);
    assert_eq!(metric(&gw, made_room).await, Some(2.0));
    gw.shutdown().await;
}

/// An upload of a zstd frame whose header asks for an 8 MiB window, then nothing more: its
/// decoders' memory is held against the budget while it stalls.
async fn stalled_zstd(gw: &Gateway, key: &str) -> TcpStream {
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let head = format!(
        "POST /v1/topics/{TOPIC}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Encoding: zstd\r\nContent-Length: 1000\r\n\r\n"
    );
    // Magic, no frame size, an 8 MiB window; a raw block of 100 bytes, the record begun.
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x68, 0x20, 0x03, 0x00];
    frame.extend_from_slice(br#"{"records":[{"value":""#);
    frame.resize(9 + 100, b'h');
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&frame).await.expect("frame");
    stream
}

/// The hog tenants of these tests, allowed 1 record a second.
fn with_hogs(cfg: &mut floodgate::config::Config) {
    for (id, key) in [("hog-a", "key-hog-a"), ("hog-b", "key-hog-b")] {
        let mut hog = tenant(id, key, &[TOPIC]);
        hog.records_per_sec = Some(1);
        hog.records_burst = Some(1);
        cfg.tenants.push(hog);
    }
}

/// Waits until the body budget holds at least `bytes`.
async fn holding(gw: &Gateway, bytes: f64) {
    let mut held = 0.0;
    for _ in 0..200 {
        held = metric(gw, "floodgate_body_inflight_bytes")
            .await
            .unwrap_or(0.0);
        if held >= bytes {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the hogs hold {held}, not {bytes}");
}

/// Review 33 of #37: a coded body's decoders hold memory of their own (109 bytes of zstd held
/// 8.9 MB), and it was never cut: two tenants allowed 1 record a second kept the whole budget
/// with such bodies. Now the decoders' hold is cut for a newcomer as a body's bytes are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coded_bodys_decoders_are_cut_for_a_newcomer() {
    let kafka = mock_cluster(&[TOPIC]);
    let mut cfg = config(&kafka.bootstrap_servers());
    cfg.server.max_inflight_body_bytes = 20 << 20;
    cfg.server.max_body_bytes = 8 << 20;
    with_hogs(&mut cfg);
    let gw = Gateway::start(cfg).await;
    let mut hogs = vec![
        stalled_zstd(&gw, "key-hog-a").await,
        stalled_zstd(&gw, "key-hog-b").await,
    ];
    holding(&gw, (16 << 20) as f64).await;
    // A body of 4.5 MB does not fit in what is left: a hog's decoders are cut for it.
    let value = "v".repeat(900_000);
    let big = json!({"records": (0..5).map(|_| json!({"value": value})).collect::<Vec<_>>()});
    let (s, _, a) = post_json(&gw.url(TOPIC), KEY, &big).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(
        cut_hogs(&mut hogs).await.len(),
        1,
        "one hog's decoders were cut"
    );
    let made_room = r#"floodgate_uploads_cut_short_total{reason="made_room"}"#;
    assert_eq!(metric(&gw, made_room).await, Some(1.0));
    gw.shutdown().await;
}

/// Review 33 of #37: uploads under the size a body is watched at once, stalled, kept the
/// budget too. A body that did not end with its first chunk is watched whatever it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_stalled_uploads_are_cut_for_a_newcomer() {
    let kafka = mock_cluster(&[TOPIC]);
    let mut cfg = config(&kafka.bootstrap_servers());
    cfg.server.max_inflight_body_bytes = 66 * 1024;
    cfg.server.max_body_bytes = 8 * 1024;
    with_hogs(&mut cfg);
    for hog in &mut cfg.tenants[1..] {
        // Room for each upload's declared 4 KiB beside its others' 2 KiB.
        hog.max_buffer_share = Some(0.6);
    }
    let gw = Gateway::start(cfg).await;
    // 2 hogs x 16 uploads x 2 KiB sent of 4 KiB: all the budget but 2 KiB.
    let mut hogs = Vec::new();
    for key in ["key-hog-a", "key-hog-b"].repeat(16) {
        let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
        let head = format!(
            "POST /v1/topics/{TOPIC}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n"
        );
        let mut body = br#"{"records":[{"value":""#.to_vec();
        body.resize(2048, b's');
        stream.write_all(head.as_bytes()).await.expect("head");
        stream.write_all(&body).await.expect("body");
        hogs.push(stream);
    }
    holding(&gw, (64 * 1024) as f64).await;
    // A newcomer that declares 3 KiB and sends none of it cuts nothing (review 33's F2: room
    // made for a declared length was cut for bodies never sent).
    let mut idle = TcpStream::connect(gw.addr).await.expect("connect");
    let head = format!(
        "POST /v1/topics/{TOPIC}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 3072\r\n\r\n"
    );
    idle.write_all(head.as_bytes()).await.expect("head");
    assert_eq!(answered(&mut idle, Duration::from_millis(300)).await, "");
    let made_room = r#"floodgate_uploads_cut_short_total{reason="made_room"}"#;
    assert_eq!(metric(&gw, made_room).await, Some(0.0));
    // Bytes that arrive get their room.
    let one = json!({"records": [{"value": "v".repeat(3000)}]});
    let (s, _, a) = post_json(&gw.url(TOPIC), KEY, &one).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(
        cut_hogs(&mut hogs).await.len(),
        1,
        "one small upload was cut"
    );
    assert_eq!(metric(&gw, made_room).await, Some(1.0));
    drop(idle);
    gw.shutdown().await;
}

/// Review 33 of #37: a v3 stream holds its report window (27 KiB) and what it has not decoded
/// yet for as long as it is open, and it was never cut: open streams that send nothing more
/// kept the budget from every other tenant as stalled uploads did. A stream is watched from
/// its start, and cut for a newcomer as an upload is: it ends with a `429` report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_are_cut_for_a_newcomer() {
    use crate::common::v3::{open_stream_with, read_head, write_chunk, ReportReader};
    let kafka = mock_cluster(&[TOPIC]);
    let mut cfg = config(&kafka.bootstrap_servers());
    cfg.server.max_inflight_body_bytes = 300_000;
    cfg.server.max_body_bytes = 64 * 1024;
    with_hogs(&mut cfg);
    for hog in &mut cfg.tenants[1..] {
        hog.max_buffer_share = Some(0.6);
    }
    let gw = Gateway::start(cfg).await;
    let path = format!("/v3/clusters/c/topics/{TOPIC}/records");
    // 2 hogs x 4 streams, each begun with a record it never finishes: 35.5 KB each, 284 KB.
    let mut hogs = Vec::new();
    for (i, key) in ["key-hog-a", "key-hog-b"].repeat(4).into_iter().enumerate() {
        let (addr, path) = (gw.addr, path.clone());
        let hog = tokio::task::spawn_blocking(move || {
            let (mut stream, mut reader) = open_stream_with(addr, &path, key);
            write_chunk(&mut stream, br#"{"value":{"type":"JSON","data":"h"#).expect("write");
            let status = read_head(&mut reader);
            if status != 200 {
                let mut rest = String::new();
                let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
                panic!("{i} {key}: {status} {rest}");
            }
            (stream, reader)
        });
        hogs.push(hog.await.expect("hog"));
    }
    holding(&gw, (8 * 35_000) as f64).await;
    // A 30 KB record does not fit beside them: one hog's stream is cut for it.
    let one = json!({"records": [{"value": "v".repeat(30_000)}]});
    let (s, _, a) = post_json(&gw.url(TOPIC), KEY, &one).await;
    assert_eq!(s, 200, "{a}");
    let made_room = r#"floodgate_uploads_cut_short_total{reason="made_room"}"#;
    assert_eq!(metric(&gw, made_room).await, Some(1.0));
    let ends = tokio::task::spawn_blocking(move || {
        let mut ends = Vec::new();
        for (i, (stream, reader)) in hogs.into_iter().enumerate() {
            let wait = if i == 0 { 500 } else { 50 };
            stream
                .set_read_timeout(Some(Duration::from_millis(wait)))
                .expect("timeout");
            if let Some(end) = ReportReader::new(reader).next() {
                ends.push(end);
            }
        }
        ends
    })
    .await
    .expect("ends");
    assert_eq!(ends.len(), 1, "one stream was cut: {ends:?}");
    assert_eq!(ends[0]["error_code"], 429, "{ends:?}");
    gw.shutdown().await;
}
