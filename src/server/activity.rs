//! What a connection is doing: the requests in flight (a streamed answer is in flight until its
//! body has ended), when it was last idle, and the deadlines of its streamed answers, which
//! close an HTTP/1 connection whose client stopped reading.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How often a connection with a streamed answer looks at its deadline at least (a handler
/// may move the deadline earlier).
pub(super) const STREAM_CHECK: Duration = Duration::from_millis(250);

/// The latest time a streamed answer's body may still be running; attached by a handler as a
/// response extension and moved on by it (from any task) as the stream makes progress.
#[derive(Debug, Clone)]
pub struct StreamDeadline(Arc<AtomicU64>);

impl StreamDeadline {
    pub fn new(at: Instant) -> Self {
        Self(Arc::new(AtomicU64::new(Self::ns(at))))
    }

    /// Moves the deadline to `at` (earlier or later).
    pub fn set(&self, at: Instant) {
        self.0.store(Self::ns(at), Ordering::Release);
    }

    pub fn passed(&self, now: Instant) -> bool {
        Self::ns(now) > self.0.load(Ordering::Acquire)
    }

    /// Nanoseconds since a process-wide origin (an `Instant` does not fit in an atomic).
    fn ns(at: Instant) -> u64 {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        u64::try_from(at.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// When the connection last had no request in flight, and how many it has now.
pub(super) struct Activity {
    pub(super) opened: Instant,
    pub(super) in_flight: AtomicUsize,
    /// Nanoseconds after `opened` at which the last request finished (0: none yet).
    pub(super) idle_since_ns: AtomicU64,
    /// Requests served so far.
    pub(super) served: AtomicU64,
    /// Nanoseconds after `opened` at which the peer last sent a byte (0: none yet).
    pub(super) heard_ns: AtomicU64,
    /// Deadlines of the streamed answers in flight (gone when their body is dropped), for
    /// HTTP/1 connections only.
    pub(super) deadlines: std::sync::Mutex<Vec<std::sync::Weak<AtomicU64>>>,
    /// Told when a deadline is added, so the watch looks at it now, not at its next check;
    /// shared with the connection's `ConnectionTrust`, which tells it when the connection
    /// must close (one signal for the watch to wait on).
    pub(super) told: Arc<tokio::sync::Notify>,
    /// Deadlines of streamed answers whose body has ended but may not be written out yet (a
    /// client that does not read leaves them in the connection's buffers): held until the
    /// connection's next request, so the connection is still closed at the deadline.
    pub(super) sent: std::sync::Mutex<Vec<StreamDeadline>>,
    pub(super) http1: bool,
}

impl Activity {
    pub(super) fn new(opened: Instant, http1: bool) -> Self {
        Self {
            opened,
            in_flight: AtomicUsize::new(0),
            idle_since_ns: AtomicU64::new(0),
            served: AtomicU64::new(0),
            heard_ns: AtomicU64::new(0),
            deadlines: std::sync::Mutex::default(),
            told: Arc::default(),
            sent: std::sync::Mutex::default(),
            http1,
        }
    }

    /// Told by `told` (the connection's `ConnectionTrust`'s signal) rather than its own.
    pub(super) fn told_by(mut self, told: Arc<tokio::sync::Notify>) -> Self {
        self.told = told;
        self
    }

    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        // A new request: the answers before it were written out.
        self.sent_deadlines().clear();
        InFlight(self.clone())
    }

    pub(super) fn sent_deadlines(&self) -> std::sync::MutexGuard<'_, Vec<StreamDeadline>> {
        self.sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The instant after which the connection may be closed for want of requests, if none is
    /// in flight now: the first request must come within `first`, later ones within `idle`.
    pub(super) fn idle_deadline(&self, first: Duration, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        if self.served.load(Ordering::Acquire) == 0 {
            return Some(self.opened + first);
        }
        let since = Duration::from_nanos(self.idle_since_ns.load(Ordering::Acquire));
        Some(self.opened + since + idle)
    }

    /// Whether the connection has had no request at all: none served, none in flight.
    pub(super) fn never_asked(&self) -> bool {
        self.served.load(Ordering::Acquire) == 0 && self.in_flight.load(Ordering::Acquire) == 0
    }

    /// How long the peer has sent nothing, at `now`.
    pub(super) fn quiet_for(&self, now: Instant) -> Duration {
        let heard = Duration::from_nanos(self.heard_ns.load(Ordering::Relaxed));
        now.saturating_duration_since(self.opened + heard)
    }

    pub(super) fn watch_deadline(&self, deadline: &StreamDeadline) {
        if !self.http1 {
            return;
        }
        let mut deadlines = self
            .deadlines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        deadlines.retain(|d| d.strong_count() > 0);
        deadlines.push(Arc::downgrade(&deadline.0));
        self.told.notify_one();
    }

    /// Whether a streamed answer in flight is past its deadline (`Err`), else how long until
    /// the earliest deadline (`Ok(None)`: none in flight).
    pub(super) fn stream_due(&self, now: Instant) -> Result<Option<Duration>, ()> {
        let mut deadlines = self
            .deadlines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        deadlines.retain(|d| d.strong_count() > 0);
        let now_ns = StreamDeadline::ns(now);
        let mut next: Option<u64> = None;
        let sent: Vec<Arc<AtomicU64>> = self.sent_deadlines().iter().map(|d| d.0.clone()).collect();
        let running = deadlines.iter().filter_map(std::sync::Weak::upgrade);
        for d in running.chain(sent) {
            let at = d.load(Ordering::Acquire);
            if now_ns > at {
                return Err(());
            }
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        Ok(next.map(|at| Duration::from_nanos(at - now_ns)))
    }
}

/// A streamed answer's body, holding its request's in-flight mark (and its deadline) until
/// it ends or is dropped.
struct Streamed {
    inner: axum::body::Body,
    in_flight: Option<InFlight>,
    deadline: Option<StreamDeadline>,
    activity: Arc<Activity>,
}

impl Drop for Streamed {
    fn drop(&mut self) {
        // The body is done, its last bytes perhaps still in the connection's buffers.
        if let Some(d) = self.deadline.take() {
            if self.activity.http1 {
                self.activity.sent_deadlines().push(d);
            }
        }
    }
}

impl axum::body::HttpBody for Streamed {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.in_flight = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A handler's answer as the connection sends it: one whose whole body is known is done when
/// its head is out; a streamed one stays in flight until its body ends.
pub(super) fn in_flight_until_sent(
    response: axum::response::Response,
    in_flight: InFlight,
    activity: &Activity,
) -> axum::response::Response {
    use axum::body::HttpBody as _;
    if response.body().is_end_stream() || response.body().size_hint().exact().is_some() {
        return response;
    }
    let deadline = response.extensions().get::<StreamDeadline>().cloned();
    if let Some(d) = &deadline {
        activity.watch_deadline(d);
    }
    let owner = in_flight.0.clone();
    response.map(|inner| {
        axum::body::Body::new(Streamed {
            inner,
            in_flight: Some(in_flight),
            deadline,
            activity: owner,
        })
    })
}

pub(super) struct InFlight(pub(super) Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        let since = u64::try_from(a.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        a.idle_since_ns.store(since, Ordering::Release);
        a.served.fetch_add(1, Ordering::AcqRel);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
