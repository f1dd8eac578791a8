//! Real parts that fail on purpose: a Tansu broker of the test's own (stalled with SIGSTOP,
//! resumed with SIGCONT, by its PID), and a TCP proxy that loses answers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A Tansu broker of the test's own: loopback, in memory, on a free port, in a folder of its
/// own (Tansu reads ./.env); killed (by PID) when dropped.
pub struct OwnTansu {
    pub port: u16,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl OwnTansu {
    pub fn start() -> Self {
        Self::start_advertising(None)
    }

    /// Started as [`OwnTansu::start`], but telling clients to connect to `advertised` (a
    /// proxy's port) rather than to itself: Kafka clients reach a broker at the address its
    /// metadata names, so a proxy stays in their path only if the broker names the proxy.
    pub fn start_advertising(advertised: Option<u16>) -> Self {
        let port = super::free_port();
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join(".env"), "").expect(".env");
        let url = format!("tcp://127.0.0.1:{port}");
        let advertised_url = format!("tcp://127.0.0.1:{}", advertised.unwrap_or(port));
        let home = std::env::var("CARGO_HOME")
            .unwrap_or_else(|_| format!("{}/.cargo", std::env::var("HOME").unwrap_or_default()));
        let installed = format!("{home}/bin/tansu");
        let binary = if std::path::Path::new(&installed).exists() {
            installed
        } else {
            "tansu".to_string()
        };
        let child = std::process::Command::new(binary)
            .current_dir(dir.path())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised_url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("tansu (scripts/tansu.sh install)");
        let patience = (Duration::from_secs(10), Duration::from_millis(20));
        super::wait_for_port(port, patience, "tansu");
        Self {
            port,
            child,
            _dir: dir,
        }
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    }

    /// Stalls the broker without losing anything (SIGSTOP).
    pub fn stall(&self) {
        self.signal("-STOP");
    }

    /// Lets it go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }
}

impl Drop for OwnTansu {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the proxy does with one connection (one request: the test's clients never reuse one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Forwarded both ways.
    Forward,
    /// The request is forwarded; once the gateway starts answering, both sides are closed and
    /// the client hears nothing: processed, answer lost.
    LoseAnswer,
    /// The client's first bytes are forwarded, then both sides are closed while the gateway
    /// is still working on them: the client has gone mid-request.
    CutEarly,
}

/// A TCP proxy in front of one gateway, deciding each connection's [`Fate`] by its number.
pub struct Proxy {
    pub addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    pub lost: Arc<AtomicU64>,
    pub cut: Arc<AtomicU64>,
    /// Connections closed because the gateway could not be reached (it was down).
    pub unreachable: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr, fate: fn(u64) -> Fate) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let target = Arc::new(Mutex::new(target));
        let (lost, cut) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let unreachable = Arc::new(AtomicU64::new(0));
        let (t, l, c, u) = (
            target.clone(),
            lost.clone(),
            cut.clone(),
            unreachable.clone(),
        );
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            while let Ok((client, _)) = listener.accept().await {
                n += 1;
                let upstream = *t.lock().expect("target");
                let fate = fate(n);
                let (l, c, u) = (l.clone(), c.clone(), u.clone());
                tokio::spawn(async move {
                    let Ok(Ok(server)) =
                        tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(upstream))
                            .await
                    else {
                        // The gateway is down: the client's connection is closed.
                        u.fetch_add(1, Relaxed);
                        return;
                    };
                    match fate {
                        Fate::Forward => forward(client, server).await,
                        Fate::LoseAnswer => {
                            if lose_answer(client, server).await {
                                l.fetch_add(1, Relaxed);
                            }
                        }
                        Fate::CutEarly => {
                            cut_early(client, server).await;
                            c.fetch_add(1, Relaxed);
                        }
                    }
                });
            }
        });
        Self {
            addr,
            target,
            lost,
            cut,
            unreachable,
            task,
        }
    }

    /// Sends new connections to another address (a restarted gateway).
    pub fn retarget(&self, to: SocketAddr) {
        *self.target.lock().expect("target") = to;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(mut client: TcpStream, mut server: TcpStream) {
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// Forwards the request until the gateway's first answer byte, then closes both. True when
/// an answer was indeed lost.
async fn lose_answer(client: TcpStream, server: TcpStream) -> bool {
    let (mut from_client, _to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
    });
    let mut byte = [0u8; 1];
    let answered = matches!(
        tokio::time::timeout(Duration::from_secs(60), from_server.read(&mut byte)).await,
        Ok(Ok(1))
    );
    up.abort();
    answered
}

/// Forwards what the client sent in its first moment, then closes both.
async fn cut_early(mut client: TcpStream, mut server: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_millis(5);
    loop {
        match tokio::time::timeout_at(deadline, client.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                if server.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            _ => break,
        }
    }
    // Give the gateway a moment with the request before its client disappears.
    tokio::time::sleep(Duration::from_millis(2)).await;
}
