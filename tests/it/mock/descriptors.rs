//! Descriptors under a low `RLIMIT_NOFILE`, on the real binary (started with `prlimit`, as
//! systemd's or a container's default of 1,024 would start it): a client holding thousands of
//! silent connections cannot take every descriptor and starve the produce API, and a soft limit
//! below the hard one is raised at start-up.

use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use serde_json::json;

const TOPIC: &str = "test.fds";

/// The release of the binary under `soft:hard` descriptors, on `cluster`; killed when dropped.
struct Limited {
    child: Child,
    produce: SocketAddr,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(cluster: &Cluster, soft: u64, hard: u64) -> Limited {
    let dir = tempfile::tempdir().expect("dir");
    let (port, admin) = (free_port(), free_port());
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
         [kafka]\nbootstrap_servers = \"{}\"\n[log]\nlevel = \"info\"\n\
         [[tenants]]\nid = \"acme\"\napi_key_sha256 = [\"{}\"]\ntopics = [\"test.*\"]\n",
        cluster.bootstrap_servers(),
        floodgate::identity::ApiKeyHash::of_key(KEY).to_hex()
    );
    let path = dir.path().join("floodgate.toml");
    std::fs::write(&path, config).expect("config");
    let log = dir.path().join("floodgate.log");
    let child = Command::new("prlimit")
        .arg(format!("--nofile={soft}:{hard}"))
        .arg(env!("CARGO_BIN_EXE_floodgate"))
        .arg("--config")
        .arg(&path)
        .env("FLOODGATE_ADMIN_TOKEN", "ops:fds-test-token-0123456789")
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(Stdio::null())
        .spawn()
        .expect("prlimit (util-linux)");
    let patience = (Duration::from_secs(20), Duration::from_millis(50));
    wait_for_port(admin, patience, "floodgate");
    Limited {
        child,
        produce: SocketAddr::from(([127, 0, 0, 1], port)),
        log,
        _dir: dir,
    }
}

/// The soft and hard `Max open files` of a process.
fn limits(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("line");
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[0], n[1])
}

/// A produce request from `from` (another loopback address than the flood's).
async fn produce(gw: SocketAddr, from: IpAddr) -> Result<u16, String> {
    let client = reqwest::Client::builder()
        .local_address(from)
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    client
        .post(format!("http://{gw}/v1/topics/{TOPIC}/records"))
        .bearer_auth(KEY)
        .json(&json!({"records": [{"value": 1}]}))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| e.to_string())
}

/// The binary under a hard limit of 1,024 descriptors, answering a produce request from
/// 127.0.0.2 (the address the floods' victim sends from) before any flood.
async fn answering_under_1024(cluster: &Cluster) -> (Limited, IpAddr) {
    let gw = start(cluster, 1024, 1024);
    let other: IpAddr = "127.0.0.2".parse().expect("ip");
    assert_eq!(
        produce(gw.produce, other).await,
        Ok(200),
        "before the flood"
    );
    (gw, other)
}

/// Three produce requests from `from`, one after another.
async fn three_from(gw: SocketAddr, from: IpAddr) -> Vec<Result<u16, String>> {
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(produce(gw, from).await);
    }
    answers
}

/// Under a hard limit of 1,024 (nothing to raise), `max_connections` is clamped to what fits
/// and one address's 3,000 silent connections hold at most its allowance of unauthenticated
/// ones: every produce request from another address is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_silent_connections_do_not_starve_produce_requests() {
    let cluster = mock_cluster(&[TOPIC]);
    let (gw, other) = answering_under_1024(&cluster).await;
    let mut silent = Vec::new();
    for _ in 0..3000 {
        // A refused connection is accepted and closed at once: the connect still succeeds.
        if let Ok(s) = tokio::net::TcpStream::connect(gw.produce).await {
            silent.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        three_from(gw.produce, other).await,
        vec![Ok(200); 3],
        "produce requests during the flood"
    );
    drop(silent);
    let log = std::fs::read_to_string(&gw.log).unwrap_or_default();
    assert!(
        log.contains("max_connections does not fit"),
        "the clamp is said: {log}"
    );
    assert!(
        !log.contains("accept failed"),
        "no descriptor ran out: {log}"
    );
}

/// Review 20 of #37: silent connections from many addresses, each within its allowance (12
/// per address under this limit), filled the 384 slots the clamped listener serves, and a new
/// client waited ~9 s in the backlog for one to time out. The listener full, a newcomer takes
/// the slot of the oldest silent connection of the address holding the most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_from_many_addresses_do_not_keep_a_new_client_waiting() {
    let cluster = mock_cluster(&[TOPIC]);
    let (gw, other) = answering_under_1024(&cluster).await;
    // 40 addresses x 12: more than the 384 slots.
    let mut silent = Vec::new();
    for a in 0..40u8 {
        for _ in 0..12 {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket
                .bind(SocketAddr::from(([127, 0, 1, a + 1], 0)))
                .expect("bind");
            if let Ok(s) =
                tokio::time::timeout(Duration::from_millis(200), socket.connect(gw.produce)).await
            {
                silent.extend(s.ok());
            }
        }
    }
    // The flood's own newcomers (96 past the slots) take their room first: asked while they
    // still arrive, the client's first request waited 2-5 s, past its 5 s in 4 runs of 6.
    // Once the listener is full and settled, each request waits 1-4 s (6 runs).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        three_from(gw.produce, other).await,
        vec![Ok(200); 3],
        "answered within the client's 5 s while the listener is full"
    );
    drop(silent);
}

/// A soft limit below the hard one is raised to it at start-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_descriptor_limit_is_raised_to_the_hard_limit() {
    let cluster = mock_cluster(&[TOPIC]);
    let gw = start(&cluster, 1024, 16_384);
    assert_eq!(limits(gw.child.id()), (16_384, 16_384));
    assert_eq!(
        produce(gw.produce, "127.0.0.1".parse().expect("ip")).await,
        Ok(200)
    );
}
