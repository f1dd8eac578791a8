//! Serving a router on a listener with a bound on every connection-level edge:
//! - how many connections at once (a semaphore; the rest wait in the kernel's backlog, but a
//!   connection accepted when it is full first asks [`Unverified::make_room_for`]: an address
//!   holding more unauthenticated connections than the newcomer's gives up its oldest, or
//!   the tenant holding the most authenticated ones its oldest idle one, closed gracefully;
//!   newcomers wait for their slots beside each other, see [`newcomer`]);
//! - how long a new connection may take to show what it speaks (TLS handshake, or the first
//!   bytes that tell HTTP/1 from HTTP/2) and to send its first request head: `header_read_timeout`;
//! - how long any later HTTP/1 request head may take, counted from when the previous answer
//!   was sent (hyper's header timer runs while it waits for the next head), so an idle HTTP/1
//!   keep-alive connection lasts at most `min(header_read_timeout, idle_timeout)`;
//! - how long a connection may sit with no request in flight (an open HTTP/2 session, or any
//!   connection between requests): `idle_timeout` (then it is closed gracefully; HTTP/2 gets
//!   a GOAWAY). A request is in flight until its answer's body has ended — a streamed answer
//!   (one whose length is not known when its head is sent) keeps its connection busy for as
//!   long as it streams;
//! - how long a streamed answer may go on: a handler may attach a [`StreamDeadline`] to it,
//!   which it moves on as the stream makes progress; an HTTP/1 connection whose answer is past
//!   its deadline is closed at once (a client that stops reading cannot keep it open, and
//!   waiting for the answer to finish would wait for exactly what is stuck). HTTP/2 streams are
//!   left to flow control: closing the connection would cut the healthy streams beside a
//!   stalled one, and a stalled stream holds only what its handler bounds (its body hold);
//! - how large a request head may be, and how many HTTP/2 streams a connection may open at once
//!   and how much unread body data it may buffer (flow-control windows);
//! - how many connections one client address may hold before any of its requests has
//!   authenticated ([`unverified`], on the produce listener).
//!
//! We decide HTTP/1 or HTTP/2 ourselves (ALPN on TLS, the connection preface on plain TCP)
//! instead of letting a builder sniff without a deadline: a socket that sends nothing, or one
//! byte, is closed on time like any other slow client.
//!
//! Shutdown is graceful: stop accepting, ask every connection to finish (HTTP/1 closes after the
//! request in flight, HTTP/2 sends GOAWAY), wait for them up to the drain time.
//!
//! A foundation module: it serves any axum router and imports nothing of floodgate's but
//! `tls` (a verified client certificate's names travel with each request as an extension),
//! `forwarded` (trusted proxies), `auth_failures` (how addresses are counted) and
//! `descriptors` (how many newcomers may wait for a slot).
//!
//! Layer: foundations. Imports nothing of floodgate's above the foundations.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt as _;

mod activity;
mod newcomer;
pub mod unverified;
mod wire;
pub use activity::StreamDeadline;
use activity::{in_flight_until_sent, Activity, STREAM_CHECK};
pub use unverified::{ConnectionTrust, Unverified};
use wire::Wire;

/// Connection-level bounds, and TLS when configured.
#[derive(Clone)]
pub struct ConnectionBounds {
    pub max_connections: usize,
    /// Time to finish the TLS handshake and protocol detection, and to send a request head.
    pub header_read_timeout: Duration,
    /// Longest time a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    pub max_header_bytes: usize,
    /// HTTP/2 streams one connection may have open at once.
    pub http2_max_streams: u32,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Connections one address may hold before one of its requests authenticates (`None`:
    /// unbounded, the admin listener).
    pub unverified: Option<Arc<Unverified>>,
}

/// Unread request-body bytes HTTP/2 may buffer per stream and per connection (flow control):
/// what a connection can make us hold before our own body budget sees a byte.
pub const HTTP2_STREAM_WINDOW: u32 = 256 * 1024;
pub const HTTP2_CONNECTION_WINDOW: u32 = 1024 * 1024;

const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
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
    let waiting = Arc::new(Semaphore::new(newcomer::waiting_bound(
        bounds.max_connections,
    )));
    let (stop_tx, stop_rx) = watch::channel(false);
    let bounds = Arc::new(bounds);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
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
        // Over its address's allowance of unauthenticated connections: closed before a byte
        // is read.
        let trust = match &bounds.unverified {
            Some(unverified) => match unverified.admit(peer.ip()) {
                Some(trust) => Some(trust),
                None => continue,
            },
            None => None,
        };
        let _ = stream.set_nodelay(true);
        let conn = Accepted {
            stream,
            peer: Peer {
                addr: peer,
                trust,
                cert: None,
            },
        };
        // A slot free: served at once. Else the newcomer waits for one beside the others
        // waiting, asking for room (see `newcomer`), and the accept loop goes on unless as
        // many wait as may.
        match permits.clone().try_acquire_owned() {
            Ok(permit) => conn.spawn(permit, &router, &bounds, &stop_rx),
            Err(_) => {
                let place = tokio::select! {
                    p = waiting.clone().acquire_owned() => p,
                    () = &mut shutdown => break,
                };
                let Ok(place) = place else { break };
                let (permits, router, bounds, stop) = (
                    permits.clone(),
                    router.clone(),
                    bounds.clone(),
                    stop_rx.clone(),
                );
                tokio::spawn(async move {
                    let unverified = bounds.unverified.as_deref();
                    let slot = newcomer::slot_for(permits, unverified, peer.ip(), stop.clone());
                    // No longer than it would have to send its head once served: a waiting
                    // place is held for a bounded time, whatever fills the listener.
                    let slot = tokio::time::timeout(bounds.header_read_timeout, slot).await;
                    if let Ok(Some(permit)) = slot {
                        drop(place);
                        conn.spawn(permit, &router, &bounds, &stop);
                    }
                });
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a permit until it ends: all permits back means all closed.
    let all = u32::try_from(bounds.max_connections).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(drain, permits.acquire_many(all))
        .await
        .is_ok();
    drained
}

/// An accepted connection and who is at its other end.
struct Accepted {
    stream: TcpStream,
    peer: Peer,
}

impl Accepted {
    /// Serves it on its own task, holding `permit` until it ends.
    fn spawn(
        self,
        permit: OwnedSemaphorePermit,
        router: &Router,
        bounds: &Arc<ConnectionBounds>,
        stop: &watch::Receiver<bool>,
    ) {
        let (router, bounds, stop) = (router.clone(), bounds.clone(), stop.clone());
        let Accepted { stream, peer } = self;
        if let Some(trust) = &peer.trust {
            trust.seated();
        }
        let trust = peer.trust.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, router, &bounds, stop).await;
            match trust {
                Some(trust) => trust.hand_on(permit),
                None => drop(permit),
            }
        });
    }
}

/// Who is at the other end: its address, its mark while it has not authenticated, and its
/// verified client certificate (mTLS). Each request carries it as its one extension of the
/// connection's (one allocation and map insert per extension and request).
#[derive(Clone, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    pub trust: Option<ConnectionTrust>,
    /// Read once per connection, after its handshake.
    pub cert: Option<Arc<crate::tls::ClientCertificate>>,
}

async fn serve_connection(
    mut stream: TcpStream,
    peer: Peer,
    router: Router,
    bounds: &ConnectionBounds,
    stop: watch::Receiver<bool>,
) {
    let opened = Instant::now();
    let deadline = tokio::time::Instant::from_std(opened + bounds.header_read_timeout);
    // Closed at once when evicted, whatever it is doing (unauthenticated): here while it
    // shakes hands, then by the watch.
    let trust = peer.trust.clone();
    match &bounds.tls {
        Some(acceptor) => {
            let accept = tokio::time::timeout_at(deadline, acceptor.accept(stream));
            let Some(Ok(Ok(tls))) = unless_evicted(trust.as_ref(), accept).await else {
                return;
            };
            let protocol = match tls.get_ref().1.alpn_protocol() {
                Some(b"h2") => Protocol::Http2,
                _ => Protocol::Http1,
            };
            // Read once per connection; each request carries it (an Arc) as an extension.
            let peer = Peer {
                cert: crate::tls::client_certificate(tls.get_ref().1),
                ..peer
            };
            let io = Wire::new(tls, Vec::new()).counted_by(trust);
            drive(io, protocol, peer, router, bounds, opened, stop).await;
        }
        None => {
            let detected = tokio::time::timeout_at(deadline, detect(&mut stream));
            let Some(Ok(Ok((protocol, prefix)))) = unless_evicted(trust.as_ref(), detected).await
            else {
                return;
            };
            let io = Wire::new(stream, prefix).counted_by(trust);
            drive(io, protocol, peer, router, bounds, opened, stop).await;
        }
    }
}

/// `work`'s output, or `None` once the connection is evicted.
async fn unless_evicted<T>(
    trust: Option<&ConnectionTrust>,
    work: impl Future<Output = T>,
) -> Option<T> {
    let Some(trust) = trust else {
        return Some(work.await);
    };
    tokio::select! {
        out = work => Some(out),
        () = trust.evicted() => None,
    }
}

/// Reads just enough to tell HTTP/2's connection preface from anything else.
async fn detect(stream: &mut TcpStream) -> std::io::Result<(Protocol, Vec<u8>)> {
    let mut seen = Vec::with_capacity(H2_PREFACE.len());
    let mut chunk = [0u8; 24];
    loop {
        let want = H2_PREFACE.len() - seen.len();
        let n = stream.read(&mut chunk[..want]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        seen.extend_from_slice(&chunk[..n]);
        if !H2_PREFACE.starts_with(&seen) {
            return Ok((Protocol::Http1, seen));
        }
        if seen.len() == H2_PREFACE.len() {
            return Ok((Protocol::Http2, seen));
        }
    }
}

/// Serves one connection in the protocol it speaks, closing it gracefully when it idles too
/// long or the server shuts down.
#[allow(clippy::too_many_arguments)]
async fn drive<I>(
    io: Wire<I>,
    protocol: Protocol,
    peer: Peer,
    router: Router,
    bounds: &ConnectionBounds,
    opened: Instant,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut activity = Activity::new(opened, protocol == Protocol::Http1);
    if let Some(trust) = &peer.trust {
        activity = activity.told_by(trust.told());
    }
    let activity = Arc::new(activity);
    if let Some(trust) = &peer.trust {
        trust.served(&activity);
    }
    let tracker = activity.clone();
    let trust = peer.trust.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let guard = tracker.begin();
        let router = router.clone();
        let activity = tracker.clone();
        let mut request = request.map(axum::body::Body::new);
        // Who is calling: its address (to limit failures), its mark (the pipeline marks the
        // connection once a request authenticates), its certificate's names.
        request.extensions_mut().insert(peer.clone());
        async move {
            let response = router.oneshot(request).await;
            response.map(|r| in_flight_until_sent(r, guard, &activity))
        }
    });
    let io = TokioIo::new(io.heard_by(&activity));
    let watch = Watch {
        activity: &activity,
        trust: trust.as_ref(),
        first: bounds.header_read_timeout,
        idle: bounds.idle_timeout,
        stop: &mut stop,
    };
    match protocol {
        Protocol::Http1 => {
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(bounds.header_read_timeout)
                .max_buf_size(bounds.max_header_bytes)
                .serve_connection(io, service);
            watch
                .run(connection, |c| {
                    http1::Connection::graceful_shutdown(c);
                })
                .await;
        }
        Protocol::Http2 => {
            let connection = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .max_concurrent_streams(bounds.http2_max_streams)
                .max_header_list_size(u32::try_from(bounds.max_header_bytes).unwrap_or(u32::MAX))
                .initial_stream_window_size(HTTP2_STREAM_WINDOW)
                .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
                .adaptive_window(false)
                // Dead peers are found by pings; idle live ones by the idle timeout.
                .keep_alive_interval(Some(bounds.idle_timeout / 2))
                .keep_alive_timeout(bounds.header_read_timeout)
                .serve_connection(io, service);
            watch
                .run(connection, |c| {
                    http2::Connection::graceful_shutdown(c);
                })
                .await;
        }
    }
}

/// Runs a connection to its end, asking it to close gracefully (once) when it has been idle
/// too long or the server stops, and dropping it if it then takes longer than the idle time.
struct Watch<'a> {
    activity: &'a Arc<Activity>,
    /// Closes the connection gracefully when it says so (over its tenant's connections), at
    /// once when it is evicted.
    trust: Option<&'a ConnectionTrust>,
    first: Duration,
    idle: Duration,
    stop: &'a mut watch::Receiver<bool>,
}

impl Watch<'_> {
    async fn run<C, E>(self, connection: C, graceful: impl FnOnce(Pin<&mut C>))
    where
        C: Future<Output = Result<(), E>>,
    {
        tokio::pin!(connection);
        let check = self.first.min(self.idle).max(Duration::from_millis(10)) / 4;
        let stopping = async {
            let _ = self.stop.wait_for(|stop| *stop).await;
        };
        tokio::pin!(stopping);
        let evicted = || self.trust.is_some_and(ConnectionTrust::is_evicted);
        let closing = || self.trust.is_some_and(ConnectionTrust::is_closing);
        // Phase 1: serve until idle too long or told to stop; a stalled streamed answer ends
        // the connection at once — woken at its deadline, not a check later. One signal
        // says the connection must close or a deadline was added: the flags tell which.
        let mut wait = check;
        loop {
            if evicted() {
                return;
            }
            if closing() {
                break;
            }
            tokio::select! {
                _ = connection.as_mut() => return,
                () = &mut stopping => break,
                () = self.activity.told.notified() => {
                    wait = STREAM_CHECK.min(check);
                }
                () = tokio::time::sleep(wait) => {
                    let now = Instant::now();
                    wait = match self.activity.stream_due(now) {
                        Err(()) => return,
                        // Just past it: a deadline is checked strictly after its instant.
                        Ok(Some(until)) => check
                            .min(until + Duration::from_millis(1))
                            .min(STREAM_CHECK),
                        Ok(None) => check,
                    };
                    let deadline = self.activity.idle_deadline(self.first, self.idle);
                    if deadline.is_some_and(|d| now >= d) {
                        break;
                    }
                }
            }
        }
        // A connection that never had a request has nothing to finish: closed now (asked to
        // close gracefully, an HTTP/2 one waited for its ping's answer, and a peer that never
        // answered held it 30 s past its first request's time: review 35b of #37).
        if self.activity.never_asked() {
            return;
        }
        // Phase 2: finish what is in flight, then close; a peer that will not let go is cut —
        // at once nearly, when it closes to make room for a newcomer that waits for its slot.
        graceful(connection.as_mut());
        let grace = match self.trust {
            Some(trust) if trust.made_room() => unverified::ROOM_GRACE,
            _ => self.idle.max(self.first),
        };
        let _ = unless_evicted(self.trust, tokio::time::timeout(grace, connection)).await;
    }
}
