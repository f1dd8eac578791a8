//! Heap allocations per request, counted by dhat as the global allocator: an in-process gateway
//! on librdkafka's mock cluster, single-record async requests (admitted) and requests of a
//! tenant whose budget is spent (refused with 429), sent over one keep-alive connection from
//! pre-built bytes so the client side allocates (almost) nothing. librdkafka's own mallocs are
//! C allocations and not counted.
//!
//!   cargo bench --bench allocs              (prints the counts; DHAT_OUT=file writes the
//!                                            profile for dh_view, with allocation sites)

use std::sync::Arc;
use std::time::Duration;

use floodgate::budget::MonotonicClock;
use floodgate::config::{Config, TenantConfig};
use floodgate::identity::ApiKeyHash;
use rdkafka::mocking::MockCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const TOPIC: &str = "bench.allocs";
const REQUESTS: u64 = 2_000;

fn tenant(id: &str, key: &str, per_sec: Option<u64>) -> TenantConfig {
    TenantConfig {
        id: id.into(),
        api_key_sha256: vec![ApiKeyHash::of_key(key).to_hex()],
        topics: vec!["bench.*".into()],
        records_per_sec: per_sec,
        records_burst: per_sec,
        ..TenantConfig::default()
    }
}

/// The request bytes; with `idempotency_key`, that header too.
fn request(key: &str, idempotency_key: Option<u64>) -> Vec<u8> {
    let body = br#"{"records":[{"value":{"n":1,"s":"abcdefghijklmnopqrstuvwxyz"}}]}"#;
    let keyed = idempotency_key
        .map(|k| format!("idempotency-key: \"bench-{k}\"\r\n"))
        .unwrap_or_default();
    let mut r = format!(
        "POST /v1/topics/{TOPIC}/records?async=true HTTP/1.1\r\nhost: bench\r\n\
         authorization: Bearer {key}\r\ncontent-type: application/json\r\n{keyed}\
         content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// Sends each request once on one connection, in order, reading each answer whole; returns
/// the status of the last one.
async fn send(stream: &mut TcpStream, requests: &[Vec<u8>], buf: &mut [u8]) -> u16 {
    let mut status = 0;
    for request in requests {
        stream.write_all(request).await.expect("write");
        let mut filled = 0;
        loop {
            let read = stream.read(&mut buf[filled..]).await.expect("read");
            assert!(read > 0, "connection closed");
            filled += read;
            let head = &buf[..filled];
            let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let text = std::str::from_utf8(&head[..end]).expect("ascii head");
            status = text[9..12].parse().expect("status");
            let length: usize = text
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if filled >= end + 4 + length {
                break;
            }
        }
    }
    status
}

fn main() {
    let _profiler = match std::env::var("DHAT_OUT") {
        Ok(path) => dhat::Profiler::builder().file_name(path).build(),
        Err(_) => dhat::Profiler::builder().testing().build(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic(TOPIC, 3, 1).expect("topic");
        let mut config = Config::from_toml_with_env("", Vec::new()).expect("defaults");
        config.kafka.bootstrap_servers = cluster.bootstrap_servers();
        config.log.level = "warn".into();
        config.tenants = vec![
            tenant("open", "allocs-open-key", None),
            tenant("spent", "allocs-spent-key", Some(1)),
        ];
        let listeners = floodgate::Listeners {
            produce: tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
            admin: tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
        };
        let addr = listeners.produce.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let gateway = tokio::spawn(floodgate::run(
            config,
            listeners,
            floodgate::RunOptions::new(Arc::new(MonotonicClock::new())),
            async {
                let _ = stopped.await;
            },
        ));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut buf = vec![0u8; 64 * 1024];
        for (what, key, keyed, expected) in [
            (
                "admitted single-record async request (202)",
                "allocs-open-key",
                false,
                202,
            ),
            (
                "admitted single-record async request with an Idempotency-Key of its own (202)",
                "allocs-open-key",
                true,
                202,
            ),
            (
                "refused request (429, tenant budget spent)",
                "allocs-spent-key",
                false,
                429,
            ),
        ] {
            // Built before counting: every keyed request has a key never seen before.
            let build = |from: u64, n: u64| -> Vec<Vec<u8>> {
                (from..from + n)
                    .map(|i| request(key, keyed.then_some(i)))
                    .collect()
            };
            let (warm, measured) = (build(0, 200), build(200, REQUESTS));
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            // Warm up: connection state, pools, the topic catalog, the spent tenant's burst.
            send(&mut stream, &warm, &mut buf).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let before = dhat::HeapStats::get();
            let status = send(&mut stream, &measured, &mut buf).await;
            let after = dhat::HeapStats::get();
            assert_eq!(status, expected, "{what}");
            let blocks = (after.total_blocks - before.total_blocks) as f64 / REQUESTS as f64;
            let bytes = (after.total_bytes - before.total_bytes) as f64 / REQUESTS as f64;
            println!("{what}: {blocks:.1} allocations, {bytes:.0} bytes per request");
        }
        let _ = stop.send(());
        let _ = gateway.await;
    });
}
