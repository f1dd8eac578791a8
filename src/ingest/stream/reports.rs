//! The stream's side that its adapter reads: each record's report in stream order, settled,
//! and the report frames, counted in a fixed window until the connection has written them.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::memory::Memory;
use super::{StreamBounds, REFUSAL_DETAIL_MAX, REPORT_WINDOW};
use crate::kafka::{Batch, Outcome};
use crate::outcome::ApiError;
use crate::server::StreamDeadline;

/// What happened to one record of the stream.
pub(super) enum Fate {
    /// Handed to Kafka as record `index` of `batch`.
    Sent { batch: Arc<Batch>, index: u32 },
    /// Refused before it reached Kafka (shared by consecutive records refused alike).
    Refused(Arc<ApiError>),
}

/// An entry of the report queue, in stream order, with what it costs the stream's hold (the
/// entry, and the refusal it was the first to carry).
pub(super) enum Queued<N> {
    Record {
        fate: Fate,
        note: N,
        cost: u32,
    },
    /// The stream ended early, for this reason: its last report.
    End(Arc<ApiError>, u32),
}

impl<N> Queued<N> {
    fn settled(&self) -> bool {
        match self {
            Queued::Record {
                fate: Fate::Sent { batch, .. },
                ..
            } => batch.is_complete(),
            _ => true,
        }
    }
}

/// One report, settled: taken from [`Reports::next`] in stream order.
pub struct Report<N>(Queued<N>);

/// What a report says.
pub enum Said<'a, N> {
    /// Kafka's answer for a record (`None`: not within the delivery timeout).
    Record {
        outcome: Option<&'a Outcome>,
        note: &'a N,
    },
    /// A record refused before it reached Kafka.
    Refused { error: &'a ApiError, note: &'a N },
    /// The stream ended early: the last report.
    Ended(&'a ApiError),
}

impl<N> Report<N> {
    pub fn said(&self) -> Said<'_, N> {
        match &self.0 {
            Queued::Record {
                fate: Fate::Sent { batch, index },
                note,
                ..
            } => Said::Record {
                outcome: batch.outcome(*index as usize),
                note,
            },
            Queued::Record {
                fate: Fate::Refused(error),
                note,
                ..
            } => Said::Refused { error, note },
            Queued::End(error, _) => Said::Ended(error),
        }
    }
}
/// How long a stream may live, as the connection loop sees it: moved on by every byte read
/// and every report sent (by the idle time plus the delivery timeout), never past its cap:
/// the stream's longest time plus the delivery timeout (no record is taken after its longest
/// time, and the last ones sent have their answer within the delivery timeout), lowered when
/// the stream ends early to its end plus the delivery timeout plus [`super::LINGER_MAX`].
/// Past it, the connection is closed whether or not its client reads.
#[derive(Debug)]
pub(super) struct Liveness {
    deadline: StreamDeadline,
    grace: Duration,
    delivery_timeout: Duration,
    /// Nanoseconds after `opened` of the cap (an atomic: the pump lowers it, frames read it).
    cap_ns: std::sync::atomic::AtomicU64,
    opened: std::time::Instant,
}

impl Liveness {
    pub(super) fn new(bounds: &StreamBounds, delivery_timeout: Duration) -> Self {
        let now = std::time::Instant::now();
        let grace = bounds.idle + delivery_timeout;
        let cap = bounds.max_duration + delivery_timeout;
        Self {
            deadline: StreamDeadline::new(now + grace.min(cap)),
            grace,
            delivery_timeout,
            cap_ns: std::sync::atomic::AtomicU64::new(nanos(cap)),
            opened: now,
        }
    }

    fn cap(&self) -> std::time::Instant {
        self.opened + Duration::from_nanos(self.cap_ns.load(std::sync::atomic::Ordering::Acquire))
    }

    pub(super) fn touch(&self) {
        let now = std::time::Instant::now();
        self.deadline.set((now + self.grace).min(self.cap()));
    }

    /// The stream ended early (now): its last reports need at most the delivery timeout, and
    /// its client [`super::LINGER_MAX`] more to read them.
    pub(super) fn ended(&self) {
        let now = std::time::Instant::now();
        let by =
            now.saturating_duration_since(self.opened) + self.delivery_timeout + super::LINGER_MAX;
        self.cap_ns
            .fetch_min(nanos(by), std::sync::atomic::Ordering::AcqRel);
        self.touch();
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The reports of one stream, in order, for its adapter to encode.
pub struct Reports<N> {
    queue: mpsc::Receiver<Queued<N>>,
    /// The next entry, taken from the queue to see whether it is settled.
    head: Option<Queued<N>>,
    memory: Arc<Memory>,
    window: Arc<Semaphore>,
    liveness: Arc<Liveness>,
    delivery_timeout: Duration,
}

/// A frame of report bytes: counted in the report window until the connection has written it.
struct Frame {
    bytes: Vec<u8>,
    _room: OwnedSemaphorePermit,
    _memory: Arc<Memory>,
    liveness: Arc<Liveness>,
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        // Written (or the connection is gone): the client is reading.
        self.liveness.touch();
    }
}

impl<N: Send + Sync + 'static> Reports<N> {
    pub(super) fn new(
        queue: mpsc::Receiver<Queued<N>>,
        memory: Arc<Memory>,
        liveness: Arc<Liveness>,
        delivery_timeout: Duration,
    ) -> Self {
        Self {
            queue,
            head: None,
            memory,
            window: Arc::new(Semaphore::new(REPORT_WINDOW)),
            liveness,
            delivery_timeout,
        }
    }

    /// The next report, in stream order, once it is settled (a sent record once Kafka has
    /// answered or the delivery timeout has passed); `None` once the stream is over.
    pub async fn next(&mut self) -> Option<Report<N>> {
        let entry = match self.head.take() {
            Some(entry) => entry,
            None => self.queue.recv().await?,
        };
        if let Queued::Record {
            fate: Fate::Sent { batch, .. },
            ..
        } = &entry
        {
            let _ = tokio::time::timeout(self.delivery_timeout, batch.wait()).await;
        }
        let (Queued::Record { cost, .. } | Queued::End(_, cost)) = &entry;
        self.memory.unqueue(u64::from(*cost));
        Some(Report(entry))
    }

    /// Whether [`Reports::next`] would answer at once (to write settled reports together).
    pub fn ready(&mut self) -> bool {
        if self.head.is_none() {
            self.head = self.queue.try_recv().ok();
        }
        self.head.as_ref().is_some_and(Queued::settled)
    }

    /// `bytes` as a frame of the answer, once the window has room for them.
    pub async fn frame(&self, bytes: Vec<u8>) -> Option<Bytes> {
        let room = u32::try_from(bytes.len().clamp(1, REPORT_WINDOW)).unwrap_or(1);
        let room = self.window.clone().acquire_many_owned(room).await.ok()?;
        Some(Bytes::from_owner(Frame {
            bytes,
            _room: room,
            _memory: self.memory.clone(),
            liveness: self.liveness.clone(),
        }))
    }

    /// The deadline the connection holds this stream to.
    pub fn deadline(&self) -> StreamDeadline {
        self.liveness.deadline.clone()
    }
}

/// What a queued entry costs: itself, the outcome slot of its record in the batch sent to Kafka
/// (kept until the record is reported), and the refusal it is the first to carry.
pub(super) fn cost<N>(fresh_refusal: Option<&ApiError>) -> u32 {
    let entry = std::mem::size_of::<Queued<N>>()
        + std::mem::size_of::<std::sync::OnceLock<crate::kafka::Outcome>>();
    let refusal = fresh_refusal.map_or(0, |e| {
        // The Arc's counts, the error, and the text it carries.
        2 * std::mem::size_of::<usize>() + std::mem::size_of::<ApiError>() + carried_text(e)
    });
    u32::try_from(entry + refusal).unwrap_or(u32::MAX)
}

/// Bytes of text an error carries on the heap (an upper bound).
fn carried_text(e: &ApiError) -> usize {
    match e {
        ApiError::RateLimited(_) | ApiError::ExceedsBurst(_) => 0,
        ApiError::UnknownPartition(s)
        | ApiError::UnknownTopic(s)
        | ApiError::KafkaUnavailable(s) => s.capacity(),
        other => other.detail().len(),
    }
}

/// The most `records` more queued entries can cost.
pub(super) fn cost_bound<N>(records: usize) -> usize {
    let one = std::mem::size_of::<Queued<N>>()
        + std::mem::size_of::<std::sync::OnceLock<crate::kafka::Outcome>>()
        + 2 * std::mem::size_of::<usize>()
        + std::mem::size_of::<ApiError>()
        + REFUSAL_DETAIL_MAX;
    records.saturating_mul(one)
}
