//! A TCP proxy on loopback that delays what the broker answers: the broker path made slower
//! without touching the broker or the protocol (bytes are forwarded as they are; only the
//! moment they are passed on changes). It runs on a thread and runtime of its own, so the
//! delay it adds does not depend on how busy the gateway's runtime is.
//!
//! Each chunk the broker sends is due `delay` after it arrived, and chunks keep their order: a
//! delay raised from 0 to 300 ms holds every later answer 300 ms; a delay lowered back lets
//! new answers through as soon as the ones still held ahead of them have gone (a delay line,
//! not a bandwidth limit: the broker's throughput is unchanged).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Chunks held per connection at most (the reader waits beyond: backpressure, not loss).
const HELD_CHUNKS: usize = 4096;

pub struct DelayProxy {
    pub addr: SocketAddr,
    delay_us: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DelayProxy {
    /// Forwards connections accepted on `listener` (bound by the caller, so the broker can be
    /// told to advertise its address first) to `target`, answers delayed by `delay`.
    pub fn start(listener: std::net::TcpListener, target: SocketAddr, delay: Duration) -> Self {
        let addr = listener.local_addr().expect("addr");
        listener.set_nonblocking(true).expect("nonblocking");
        let delay_us = Arc::new(AtomicU64::new(delay.as_micros() as u64));
        let (stop, stopped) = oneshot::channel::<()>();
        let d = delay_us.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("listener");
                let accept = async {
                    while let Ok((client, _)) = listener.accept().await {
                        let d = d.clone();
                        tokio::spawn(async move {
                            if let Ok(server) = TcpStream::connect(target).await {
                                relay(client, server, d).await;
                            }
                        });
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime ends every relay: the connections close.
        });
        Self {
            addr,
            delay_us,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The delay from now on (answers already held keep theirs).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_us.store(delay.as_micros() as u64, Relaxed);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The client's requests go to the broker at once; the broker's answers through a delay line.
async fn relay(client: TcpStream, server: TcpStream, delay_us: Arc<AtomicU64>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let up = async move {
        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
        let _ = to_server.shutdown().await;
    };
    let (held, mut due) = mpsc::channel::<(Instant, Vec<u8>)>(HELD_CHUNKS);
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_server.read(&mut buf).await {
                Ok(n) if n > 0 => {
                    let at = Instant::now() + Duration::from_micros(delay_us.load(Relaxed));
                    if held.send((at, buf[..n].to_vec())).await.is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
    };
    let write = async move {
        while let Some((at, bytes)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to_client.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to_client.shutdown().await;
    };
    tokio::join!(up, read, write);
}
