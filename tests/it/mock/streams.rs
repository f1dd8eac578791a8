//! Confluent v3 streams over real sockets, as a hostile or unlucky client meets them: an open
//! stream stops the moment its key is revoked, its tenant deleted or its topic taken away; an
//! active stream outlives the connection's idle timeout; a stream whose client stops reading
//! is closed once its deadline passes. (Memory, demand and refusal counting are tested in
//! process in `src/ingest/stream/tests.rs`.)

use std::io::Write as _;
use std::time::{Duration, Instant};

use crate::common::exposition::{sample, scrape};
use crate::common::v3::{
    first_written, open_stream, read_head, read_reports, write_chunk, ReportReader,
};
use crate::common::*;
use floodgate::config::Config;
use floodgate::identity::ApiKeyHash;
use reqwest::Method;
use serde_json::{json, Value};

fn record(i: usize) -> Vec<u8> {
    json!({"value": {"type": "STRING", "data": format!("r{i}")}})
        .to_string()
        .into_bytes()
}

async fn written(cluster: &Cluster, topic: &str) -> Vec<String> {
    value_texts(&read_all(&cluster.bootstrap_servers(), topic, 1, 1).await)
}

/// A connection's idle and header timeouts both `connection_ms`, a stream's idle timeout
/// `stream_idle_ms`: what each test here sets apart from the defaults.
fn timeouts(cfg: &mut Config, connection_ms: u64, stream_idle_ms: u64) {
    cfg.server.idle_timeout_ms = connection_ms;
    cfg.server.header_read_timeout_ms = connection_ms;
    cfg.compat.stream_idle_timeout_ms = stream_idle_ms;
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
    let (mut stream, reader) = open_stream(addr, &path);
    write_chunk(&mut stream, &record(0)).expect("write");
    let mut reader = tokio::task::spawn_blocking(move || first_written(reader))
        .await
        .expect("reader");

    let (method, path, body) = change;
    let (s, answer) = admin(&gw, method, &path, body, Some(ADMIN_TOKEN)).await;
    assert!(s < 300, "{s} {answer}");
    let changed = Instant::now();
    let rest = tokio::task::spawn_blocking(move || {
        if write_after {
            let _ = write_chunk(&mut stream, &record(1));
        }
        let rest = reader.rest();
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
    let (cluster, gw) =
        gateway_on_mock("test.long", Time::Real, |cfg| timeouts(cfg, 400, 2_000)).await;
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
        let out = read_reports(&mut reader);
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
        // Long connection timeouts: a stalled stream must not wait for them.
        timeouts(cfg, 20_000, 500);
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
    // Closed 1.5 s (idle 0.5 s + delivery 1 s) after the stream last made progress, not after
    // the connection's own 20 s.
    assert!(closed_after < Duration::from_secs(10), "{closed_after:?}");
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

/// A stream that ends early (a bad record) while its client is still sending: the client
/// still reads every report — the 200 of each record written and the error — instead of a
/// connection reset that would throw the unread ones away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ended_while_its_client_still_sends_delivers_every_report() {
    let (cluster, gw) = gateway_on_mock("test.ended", Time::Real, |_| {}).await;
    let addr = gw.addr;
    for trial in 0..3 {
        let (reports, sent) = tokio::task::spawn_blocking(move || {
            let (mut stream, mut reader) =
                open_stream(addr, "/v3/clusters/c/topics/test.ended/records");
            let writer = std::thread::spawn(move || {
                let mut sent = 0;
                for i in 0..20 {
                    let chunk: Vec<u8> = (0..50)
                        .flat_map(|j| record(trial * 10_000 + i * 50 + j))
                        .collect();
                    write_chunk(&mut stream, &chunk).expect("write");
                    sent += 50;
                }
                let _ = write_chunk(&mut stream, br#"{"value": {"type": "BINARY", "data": 7}}"#);
                // Keeps sending after the bad record, as a fast client does.
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(3) {
                    if write_chunk(&mut stream, &record(999_999)).is_err() {
                        break;
                    }
                }
                sent
            });
            assert_eq!(read_head(&mut reader), 200);
            let mut reports = ReportReader::new(reader);
            let mut out = Vec::new();
            while let Some(r) = reports.next() {
                out.push(r);
                // Reads at its own pace.
                std::thread::sleep(Duration::from_micros(200));
            }
            (out, writer.join().expect("writer"))
        })
        .await
        .expect("client");
        let written = reports.iter().filter(|r| r["error_code"] == 200).count();
        assert_eq!(written, sent, "trial {trial}: a 200 for every good record");
        assert_eq!(
            reports.last().and_then(|r| r["error_code"].as_i64()),
            Some(422),
            "trial {trial}: the error ends the reports"
        );
    }
    assert_eq!(written_count(&cluster, "test.ended").await, 3000);
    gw.shutdown().await;
}

async fn written_count(cluster: &Cluster, topic: &str) -> usize {
    read_all(&cluster.bootstrap_servers(), topic, 1, 3000)
        .await
        .len()
}

/// On HTTP/2 a stream whose client stops reading is left to flow control: the healthy stream
/// beside it on the same connection keeps going, past the stalled one's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_http2_stream_does_not_cut_the_healthy_stream_beside_it() {
    let (_cluster, gw) = gateway_on_mock("test.h2", Time::Real, |cfg| {
        timeouts(cfg, 2_000, 1_000);
        cfg.kafka.delivery_timeout_ms = 1_000;
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(gw.addr)
        .await
        .expect("connect");
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(512)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .expect("h2 handshake");
    tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let request = || {
        axum::http::Request::post(format!(
            "http://{}/v3/clusters/c/topics/test.h2/records",
            gw.addr
        ))
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .body(())
        .expect("request")
    };
    // A: sends records, never reads (its window of 512 bytes fills with reports).
    let (stalled, mut a) = client.send_request(request(), false).expect("stream a");
    for i in 0..50 {
        a.send_data(bytes::Bytes::from(record(i)), false)
            .expect("send a");
    }
    let _stalled = stalled.await.expect("a's head");
    // B: a record every 100 ms for 5 s — past A's deadline (1 s + 1 s) — sent on its own
    // clock (not waiting for each report, so a slow machine cannot make B idle), its reports
    // read as they come.
    let mut client = client.ready().await.expect("ready");
    let (response, mut b) = client.send_request(request(), false).expect("stream b");
    let sender = tokio::spawn(async move {
        for i in 0..50 {
            b.send_data(bytes::Bytes::from(record(i)), false)
                .expect("send b");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        b.send_data(bytes::Bytes::new(), true).expect("end b");
    });
    let mut body = response.await.expect("b's head").into_body();
    let mut reports = 0;
    let started = Instant::now();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), body.data())
        .await
        .expect("b keeps getting reports")
    {
        let chunk = chunk.expect("data");
        let _ = body.flow_control().release_capacity(chunk.len());
        reports += chunk.windows(2).filter(|w| w == b"\r\n").count();
    }
    sender.await.expect("b's sender");
    // B's body ended because B ended, after A's deadline had passed, not because A was cut.
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "b ended after {:?}",
        started.elapsed()
    );
    assert_eq!(reports, 50, "every record on b has its report");
    gw.shutdown().await;
}

/// A stream's answer is decided by its first data: white space only (nothing else will come)
/// is "no records", and a Content-Length beyond `max_body_bytes` is no reason to refuse a
/// stream whose records are each within it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_white_space_has_no_records_and_a_long_one_is_not_too_large() {
    let (_cluster, gw) = gateway_on_mock("test.first", Time::Real, |cfg| {
        cfg.server.max_body_bytes = 10_000;
    })
    .await;
    let url = format!("http://{}/v3/clusters/c/topics/test.first/records", gw.addr);
    let post = |body: Vec<u8>| {
        let url = url.clone();
        async move {
            let (status, _, text) =
                post_text(&url, KEY, &[("content-type", "application/json")], body).await;
            (status, text)
        }
    };
    let (s, text) = post(b"   \n  ".to_vec()).await;
    assert_eq!(s, 400, "{text}");
    assert!(text.contains("no records"), "{text}");
    let many: Vec<u8> = (0..1000).flat_map(record).collect();
    assert!(many.len() > 10_000);
    let (s, text) = post(many).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(text.matches("\"error_code\":200").count(), 1000, "{text}");
    gw.shutdown().await;
}

/// Many streams from two tenants whose clients send and never read their reports (so the
/// reports fill the sockets and the report queue): every connection is closed once the
/// stream's longest time has passed by the delivery timeout — not the idle time later — and
/// every byte of the body budget the streams held is given back. The gateway answers others
/// meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_that_never_read_are_closed_at_their_longest_time_plus_the_delivery_timeout() {
    const STREAMS: usize = 120;
    let (_cluster, gw) = gateway_on_mock("test.stalled", Time::Real, |cfg| {
        timeouts(cfg, 60_000, 30_000);
        cfg.compat.stream_max_duration_ms = 4_000;
        cfg.compat.stream_max_unsettled = 64;
        cfg.kafka.delivery_timeout_ms = 2_000;
        cfg.tenants.push(tenant("beta", "beta-key", &["test.*"]));
    })
    .await;
    let bound = Duration::from_millis(4_000 + 2_000);
    let addr = gw.addr;
    let clients: Vec<_> = (0..STREAMS)
        .map(|i| {
            let key = if i % 2 == 0 { KEY } else { "beta-key" };
            std::thread::spawn(move || deaf_stream(addr, key))
        })
        .collect();
    let closed: Vec<(u16, Duration)> = tokio::task::spawn_blocking(move || {
        clients
            .into_iter()
            .map(|c| c.join().expect("client"))
            .collect()
    })
    .await
    .expect("clients");
    let mut times: Vec<_> = closed.iter().map(|(s, at)| (at.as_millis(), *s)).collect();
    times.sort();
    eprintln!("closed (ms after the stream opened, status): {times:?}");
    let opened = closed.iter().filter(|(s, _)| *s == 200).count();
    assert!(
        opened >= STREAMS * 9 / 10,
        "{opened} of {STREAMS} streams opened"
    );
    let last = closed.iter().map(|(_, at)| *at).max().unwrap_or_default();
    // Within the bound, give or take a loaded machine's second (the watch looks every 250 ms).
    assert!(
        last <= bound + Duration::from_secs(1),
        "a stream closed {last:?} after it opened (bound {bound:?})"
    );
    // Every stream's hold on the body budget is back.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let text = scrape(&gw).await;
        assert!(text.contains("\nfloodgate_body_inflight_bytes "), "{text}");
        let held = sample(&text, "floodgate_body_inflight_bytes ");
        if held == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "{held} body bytes still held");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.shutdown().await;
}

/// One client that opens a stream with a small receive buffer, writes records as fast as the
/// gateway takes them and never reads its reports. Returns the answer's status and how long
/// after its head arrived (the stream opened) the gateway closed the connection.
fn deaf_stream(addr: std::net::SocketAddr, key: &str) -> (u16, Duration) {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    socket.connect(&addr.into()).expect("connect");
    let mut stream: std::net::TcpStream = socket.into();
    let head = format!(
        "POST /v3/clusters/c/topics/test.stalled/records HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {key}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("head");
    let many = "{}".repeat(200);
    write_chunk(&mut stream, many.as_bytes()).expect("first records");
    // The answer's head, byte by byte (no report is read): the stream is open.
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match std::io::Read::read(&mut stream, &mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let opened = Instant::now();
    let status = String::from_utf8_lossy(&head)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if status != 200 {
        return (status, Duration::ZERO);
    }
    stream
        .set_write_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut closed_at = None;
    while opened.elapsed() < Duration::from_secs(40) {
        match write_chunk(&mut stream, many.as_bytes()) {
            // Paced: 4,000 records a second fill the report path within a second, without
            // taking the machine from the gateway.
            Ok(()) => std::thread::sleep(Duration::from_millis(10)),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                closed_at = Some(opened.elapsed());
                break;
            }
        }
    }
    // Not closed while writing: read what was sent, up to the end of the connection.
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut sink);
    (status, closed_at.unwrap_or_else(|| opened.elapsed()))
}

/// Records a stream refuses without taking a token (here a partition the topic does not have)
/// are the tenant's unpaid work: once it is spent the stream ends with a 429 report, rather
/// than refusing records for free as long as it lasts (review 38a of #37: 511,400 404s in
/// 10 s, a core of CPU, the tenant's budgets untouched).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_refusals_spend_its_unpaid_work_ends() {
    let (_cluster, gw) = gateway_on_mock("test.nopart", Time::Manual, |cfg| {
        cfg.schema_registry.tenant_unpaid_work_ms_per_sec = 1;
        cfg.schema_registry.tenant_unpaid_work_ms_burst = 5;
    })
    .await;
    let url = format!(
        "http://{}/v3/clusters/c/topics/test.nopart/records",
        gw.addr
    );
    // 2,000 records for partition 7: 404 each, ~20 µs of work each, 40 ms in all.
    let body: Vec<u8> = (0..2_000)
        .flat_map(|i| {
            json!({"partition_id": 7, "value": {"type": "STRING", "data": format!("r{i}")}})
                .to_string()
                .into_bytes()
        })
        .collect();
    let (s, _, text) = post_text(&url, KEY, &[("content-type", "application/json")], body).await;
    assert_eq!(s, 200, "{text}");
    let not_found = text.matches("\"error_code\":404").count();
    assert!(
        (100..2_000).contains(&not_found),
        "{not_found} refused before the end: {}",
        &text[text.len().saturating_sub(600)..]
    );
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.contains("\"error_code\":429") && last.contains("unpaid"),
        "{last}"
    );
    gw.shutdown().await;
}

/// A record sent in thousands of 1-byte pieces and never finished is read as its tenant's
/// unpaid work, charged every 64 pieces: once spent, the stream ends with a 429 report
/// (review 40 of #37: 300,000 such pieces took 0.7 s of CPU and were charged nothing, as
/// only records decided were ever charged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_in_tiny_pieces_that_never_ends_spends_the_unpaid_work_and_ends_the_stream() {
    let (_cluster, gw) = gateway_on_mock("test.tiny", Time::Manual, |cfg| {
        cfg.schema_registry.tenant_unpaid_work_ms_per_sec = 1;
        cfg.schema_registry.tenant_unpaid_work_ms_burst = 5;
    })
    .await;
    let (mut stream, reader) = open_stream(gw.addr, "/v3/clusters/c/topics/test.tiny/records");
    let reports = tokio::task::spawn_blocking(move || {
        let mut reader = reader;
        reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        assert_eq!(read_head(&mut reader), 200);
        ReportReader::new(reader).rest()
    });
    // 5 ms at 2.3 µs a piece: about 2,200 pieces; 20,000 are sent, none ends the record.
    let writer = tokio::task::spawn_blocking(move || {
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let _ = write_chunk(&mut stream, br#"{"value":{"type":"STRING","data":""#);
        let pieces = b"1\r\na\r\n".repeat(20_000);
        let _ = stream.write_all(&pieces);
        stream
    });
    let reports = reports.await.expect("reports");
    let last = reports.last().map(Value::to_string).unwrap_or_default();
    assert!(
        last.contains("\"error_code\":429") && last.contains("unpaid"),
        "{reports:?}"
    );
    drop(writer.await.expect("writer"));
    gw.shutdown().await;
}
