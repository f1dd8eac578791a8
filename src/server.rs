//! Serving a router on a listener with bounds on every connection-level edge:
//! how many connections at once (a semaphore; the rest wait in the kernel's backlog), how long
//! a client may take to send its headers (slowloris), and how large the headers may be.
//! Shutdown is graceful: stop accepting, let open requests finish, close idle connections.
//!
//! A foundation module: it serves any axum router and imports nothing of floodgate's.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connection-level bounds, and TLS when configured.
#[derive(Clone)]
pub struct ConnectionBounds {
    pub max_connections: usize,
    /// Also bounds the TLS handshake.
    pub header_read_timeout: Duration,
    pub max_header_bytes: usize,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// Serves until `shutdown` resolves, then drains open connections for at most `drain`.
/// Returns whether every connection closed within that time.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    bounds: ConnectionBounds,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> bool {
    let permits = Arc::new(Semaphore::new(bounds.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_read_timeout)
        .max_buf_size(bounds.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(bounds.max_header_bytes).unwrap_or(u32::MAX));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            () = &mut shutdown => break,
        };
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(error) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        match &bounds.tls {
            None => {
                let connection =
                    builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                let connection = graceful.watch(connection.into_owned());
                tokio::spawn(async move {
                    let _ = connection.await;
                    drop(permit);
                });
            }
            Some(acceptor) => {
                let (acceptor, builder) = (acceptor.clone(), builder.clone());
                let (watcher, handshake_timeout) = (graceful.watcher(), bounds.header_read_timeout);
                tokio::spawn(async move {
                    // A client that never finishes its handshake is cut off like one that never
                    // finishes its headers.
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await
                    {
                        let connection =
                            builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
                        let _ = watcher.watch(connection.into_owned()).await;
                    }
                    drop(permit);
                });
            }
        }
    }
    drop(listener);
    tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_ok()
}
