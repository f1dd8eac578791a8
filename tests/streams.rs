//! Confluent v3 streams over real sockets, as a hostile or unlucky client meets them: an open
//! stream stops the moment its key is revoked, its tenant deleted or its topic taken away; an
//! active stream outlives the connection's idle timeout; a stream whose client stops reading
//! is closed once its deadline passes. (Memory, demand and refusal counting are tested in
//! process in `src/ingest/stream/tests.rs`.)

mod common;

use std::io::Write as _;
use std::time::{Duration, Instant};

use common::v3::{open_stream, read_head, write_chunk, ReportReader};
use common::*;
use floodgate::identity::ApiKeyHash;
use reqwest::Method;
use serde_json::{json, Value};

fn record(i: usize) -> Vec<u8> {
    json!({"value": {"type": "STRING", "data": format!("r{i}")}})
        .to_string()
        .into_bytes()
}

async fn written(cluster: &Cluster, topic: &str) -> Vec<String> {
    let (b, t) = (cluster.bootstrap_servers(), topic.to_string());
    tokio::task::spawn_blocking(move || read_back(&b, &t, 1, 1))
        .await
        .expect("reader")
        .iter()
        .map(|c| String::from_utf8_lossy(c.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

/// Opens a stream, has one record written, applies `change` through the admin API, and
/// returns every later report (the stream must end by itself) and how long after the change
/// the last one came. `write_after` sends one more record after the change.
async fn stream_across_change(
    topic: &str,
    change: (Method, String, Option<Value>),
    write_after: bool,
) -> (Vec<Value>, Duration) {
    let cluster = mock_cluster(&[topic]);
    let gw = Gateway::start(config(&cluster.bootstrap_servers())).await;
    let (addr, path) = (gw.addr, format!("/v3/clusters/c/topics/{topic}/records"));
    let (mut stream, mut reader) = open_stream(addr, &path);
    write_chunk(&mut stream, &record(0)).expect("write");
    let (first, reader) = tokio::task::spawn_blocking(move || {
        assert_eq!(read_head(&mut reader), 200);
        let mut reports = ReportReader::new(reader);
        (reports.next(), reports)
    })
    .await
    .expect("reader");
    assert_eq!(
        first.as_ref().map(|r| r["error_code"].clone()),
        Some(json!(200))
    );

    let (method, path, body) = change;
    let (s, answer) = admin(&gw, method, &path, body, Some(ADMIN_TOKEN)).await;
    assert!(s < 300, "{s} {answer}");
    let changed = Instant::now();
    let rest = tokio::task::spawn_blocking(move || {
        let mut reader = reader;
        if write_after {
            let _ = write_chunk(&mut stream, &record(1));
        }
        let mut rest = Vec::new();
        while let Some(r) = reader.next() {
            rest.push(r);
        }
        // Anything written after the end is never read.
        let _ = write_chunk(&mut stream, &record(2));
        (rest, changed.elapsed())
    })
    .await
    .expect("reader");
    assert_eq!(
        written(&cluster, topic).await,
        vec!["r0"],
        "nothing after the change is written"
    );
    gw.shutdown().await;
    rest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_ends_an_open_stream_within_a_second_even_when_it_is_idle() {
    let key_id = ApiKeyHash::of_key(KEY).key_id();
    let (rest, after) = stream_across_change(
        "test.revoked",
        (
            Method::DELETE,
            format!("/admin/tenants/acme/keys/{key_id}"),
            None,
        ),
        false,
    )
    .await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["error_code"], 401, "{rest:?}");
    assert!(
        after < Duration::from_millis(2500),
        "ended {after:?} after the change"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_tenant_ends_an_open_stream_and_its_next_record_is_not_written() {
    let (rest, _) = stream_across_change(
        "test.deleted",
        (Method::DELETE, "/admin/tenants/acme".into(), None),
        true,
    )
    .await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["error_code"], 401, "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_narrowed_topic_pattern_ends_an_open_stream_with_403() {
    let (rest, _) = stream_across_change(
        "test.narrowed",
        (
            Method::PATCH,
            "/admin/tenants/acme".into(),
            Some(json!({"topics": ["elsewhere.*"]})),
        ),
        true,
    )
    .await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["error_code"], 403, "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_stream_outlives_three_connection_idle_timeouts() {
    let (cluster, gw) = gateway_on_mock("test.long", Time::Real, |cfg| {
        cfg.server.idle_timeout_ms = 400;
        cfg.server.header_read_timeout_ms = 400;
        cfg.compat.stream_idle_timeout_ms = 2_000;
    })
    .await;
    let addr = gw.addr;
    let started = Instant::now();
    let reports = tokio::task::spawn_blocking(move || {
        let (mut stream, mut reader) = open_stream(addr, "/v3/clusters/c/topics/test.long/records");
        let writer = std::thread::spawn(move || {
            for i in 0..12 {
                write_chunk(&mut stream, &record(i)).expect("write");
                std::thread::sleep(Duration::from_millis(150));
            }
            stream.write_all(b"0\r\n\r\n").expect("end");
            stream
        });
        assert_eq!(read_head(&mut reader), 200);
        let mut reports = ReportReader::new(reader);
        let mut out = Vec::new();
        while let Some(r) = reports.next() {
            out.push(r);
        }
        drop(writer.join());
        out
    })
    .await
    .expect("client");
    let lasted = started.elapsed();
    assert!(lasted >= Duration::from_millis(1_650), "{lasted:?}");
    let codes: Vec<&Value> = reports.iter().map(|r| &r["error_code"]).collect();
    assert_eq!(codes, vec![&json!(200); 12], "{reports:?}");
    assert_eq!(written(&cluster, "test.long").await.len(), 12);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_client_stops_reading_is_closed_once_its_deadline_passes() {
    let (_cluster, gw) = gateway_on_mock("test.deaf", Time::Real, |cfg| {
        cfg.server.idle_timeout_ms = 500;
        cfg.server.header_read_timeout_ms = 500;
        cfg.compat.stream_idle_timeout_ms = 500;
        cfg.compat.stream_max_unsettled = 8;
        cfg.kafka.delivery_timeout_ms = 1_000;
    })
    .await;
    let addr = gw.addr;
    let closed_after = tokio::task::spawn_blocking(move || {
        let (mut stream, mut reader) = open_stream(addr, "/v3/clusters/c/topics/test.deaf/records");
        stream
            .set_write_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let started = Instant::now();
        // Write until the gateway stops reading (or closes), reading nothing. Empty records:
        // their reports fill this side's socket buffers quickly.
        let many = "{}".repeat(1000);
        while write_chunk(&mut stream, many.as_bytes()).is_ok() {
            if started.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
        // Now read: the buffered reports, then the end of the connection.
        reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut reader, &mut sink);
        started.elapsed()
    })
    .await
    .expect("client");
    // Idle 0.5 s + delivery 1 s of grace, then the connection's own 0.5 s: well under 20 s.
    assert!(closed_after < Duration::from_secs(15), "{closed_after:?}");
    // The gateway still serves.
    let (s, _, a) = post_json(
        &gw.url("test.deaf"),
        KEY,
        &json!({"records": [{"value": 1}]}),
    )
    .await;
    assert_eq!(s, 200, "{a}");
    gw.shutdown().await;
}
