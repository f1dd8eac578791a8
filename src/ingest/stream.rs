//! A stream of records through the pipeline: one request whose body is an open-ended sequence
//! of records (Confluent v3's streaming produce), each admitted on its own as it arrives, and
//! whose answer is one report per record, in order, each sent once it is settled.
//!
//! [`Ingest::open_stream`] takes the request through the steps every produce request takes
//! before its body — authenticate, topic, early check, topic metadata — and decodes the first
//! piece of its body; a problem there is the whole request's answer. Then a pump task owns the
//! stream until it ends:
//! - it reads the body and decodes it a piece at a time, never more records at once than the
//!   report queue has room for (`[compat] stream_max_unsettled`), so a client that does not
//!   read its reports stops being read;
//! - each record is checked against the tenant's own budgets before it is counted as demand or
//!   costs a lease call, then admitted alone (a record over budget is refused alone, later ones
//!   may pass); in cluster mode a group of records makes at most one lease call;
//! - the admitted records of a group go to Kafka as one batch;
//! - the key and the topic are checked again on every registry change and at least once a
//!   second: a revoked key, a deleted tenant or a narrowed topic pattern ends the stream with a
//!   401 or 403 report;
//! - the idle time and the longest time of a stream bound every state it can be in, waiting
//!   for the client's bytes or for room in the report queue; shutdown ends it too.
//!
//! Memory: everything a stream keeps is held against the body budget and the tenant's share of
//! it, for as long as it is kept — the record being read (at most `max_body_bytes` of text),
//! the decoded records waiting for admission with their index, the queued reports, and a fixed
//! window of report bytes written but not yet sent ([`REPORT_WINDOW`]). Before a piece is
//! decoded the most it can add is reserved; after, the hold shrinks to what is really kept.
//!
//! The adapter only encodes: it takes [`Report`]s from [`Reports`] in order and turns its lines
//! into frames through [`Reports::frame`], which waits for room in the window.
//!
//! Layer: pipeline, as `ingest`. Imports admission, tenants, Kafka, the body decoder and the
//! outcome values; never response shapes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use http_body_util::BodyExt as _;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{refused, Api, Ingest, RecordSchemas};
use crate::body::{Decoder, Framing, RecordArena, RecordNotes};
use crate::body_budget::{BodyHold, Cut};
use crate::buffer::BufferLease;
use crate::credential::{AuthError, Identity};
use crate::identity::Topic;
use crate::kafka::{Batch, Outcome, TopicInfo};
use crate::outcome::ApiError;
use crate::record::{Charge, Record};
use crate::refusal::Denial;
use crate::server::StreamDeadline;
use crate::tenant::Tenant;

/// Bounds of one stream (`[compat]`).
#[derive(Debug, Clone)]
pub struct StreamBounds {
    /// Records handed to Kafka (or refused) and not yet reported: the report queue's length.
    pub max_unsettled: usize,
    /// Longest time without a new byte from the client (or without room to read it).
    pub idle: Duration,
    /// Longest time a stream stays open.
    pub max_duration: Duration,
}

/// Report bytes a stream may have written and not yet sent to its client.
pub const REPORT_WINDOW: usize = 16 * 1024;
/// Held from the start for the report that ends a stream early, so that it can always be
/// queued — even when the stream ends because the budget is spent.
const LAST_REPORT: usize = 1024;
/// Settled reports are encoded together up to this much before they become a frame.
pub const REPORT_COALESCE: usize = 8 * 1024;
/// The longest one report line can be (names, numbers, a detail).
const REPORT_LINE_MAX: usize = 2 * 1024;
/// What a stream holds from its start to its end: its report window, the frame being encoded,
/// its last report.
const FIXED: u64 = (REPORT_WINDOW + REPORT_COALESCE + REPORT_LINE_MAX + LAST_REPORT) as u64;
/// Most body bytes decoded in one step: what is reserved before a step is about this times the
/// worst case of records per byte, so the step is kept small.
const PIECE_MAX: usize = 1024;
/// How often a stream's registry calls are given back.
const LOOKUPS_REFILL: Duration = Duration::from_secs(60);
/// How often an open stream checks its key and topic when no registry change came first.
const RECHECK: Duration = Duration::from_secs(1);
/// After a stream ends early, how long and how much of the rest of its body is read and
/// dropped while its last reports go out, and how long after they are out.
const LINGER_MAX: Duration = Duration::from_secs(10);
const LINGER_BYTES: u64 = 64 * 1024 * 1024;
const LINGER_AFTER: Duration = Duration::from_secs(1);
/// Longest detail a per-record refusal carries (an unknown partition's).
const REFUSAL_DETAIL_MAX: usize = 96;

/// A stream request as the pipeline sees it.
pub struct StreamRequest<'a> {
    pub api: Api,
    pub peer: crate::credential::Caller,
    pub headers: &'a HeaderMap,
    /// The topic as the URL named it, already percent-decoded.
    pub topic: &'a str,
    pub body: Body,
}

/// What happened to one record of the stream.
enum Fate {
    /// Handed to Kafka as record `index` of `batch`.
    Sent { batch: Arc<Batch>, index: u32 },
    /// Refused before it reached Kafka (shared by consecutive records refused alike).
    Refused(Arc<ApiError>),
}

/// An entry of the report queue, in stream order, with what it costs the stream's hold (the
/// entry, and the refusal it was the first to carry).
enum Queued<N> {
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

/// What one stream holds of the body budget: the report window and its last report (fixed),
/// what has arrived and is not decoded yet with what its decoder holds (the pump's part), and
/// its queued reports. One hold, changed under one lock by the pump and the reports side.
#[derive(Debug)]
struct Memory {
    state: Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    hold: BodyHold,
    decoding: u64,
    queued: u64,
}

impl Memory {
    /// The window reserved, or `None` when the budget cannot cover it.
    fn open(mut hold: BodyHold) -> Option<Self> {
        hold.grow(FIXED).then(|| Self {
            state: Mutex::new(Held {
                hold,
                decoding: 0,
                queued: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the decoder's part (and adds `queued` to the queue's); `false`, and nothing
    /// changed, when the budget cannot cover the new total.
    fn set(&self, decoding: usize, queued: u64) -> bool {
        let mut held = self.lock();
        let total = FIXED + decoding as u64 + held.queued + queued;
        if !held.hold.resize(total) {
            return false;
        }
        held.decoding = decoding as u64;
        held.queued += queued;
        true
    }

    /// The decoder's part as last set (the decoded records being admitted included).
    fn decoding(&self) -> u64 {
        self.lock().decoding
    }

    /// A queued report was taken off the queue.
    fn unqueue(&self, bytes: u64) {
        let mut held = self.lock();
        held.queued = held.queued.saturating_sub(bytes);
        let total = FIXED + held.decoding + held.queued;
        held.hold.resize(total);
    }
}

/// What a queued entry costs: itself, the outcome slot of its record in the batch sent to Kafka
/// (kept until the record is reported), and the refusal it is the first to carry.
fn cost<N>(fresh_refusal: Option<&ApiError>) -> u32 {
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
fn cost_bound<N>(records: usize) -> usize {
    let one = std::mem::size_of::<Queued<N>>()
        + std::mem::size_of::<std::sync::OnceLock<crate::kafka::Outcome>>()
        + 2 * std::mem::size_of::<usize>()
        + std::mem::size_of::<ApiError>()
        + REFUSAL_DETAIL_MAX;
    records.saturating_mul(one)
}

/// How long a stream may live, as the connection loop sees it: moved on by every byte read
/// and every report sent, never past the stream's longest time (each plus the delivery
/// timeout, which the last reports may still need).
#[derive(Debug)]
struct Liveness {
    deadline: StreamDeadline,
    grace: Duration,
    cap: std::time::Instant,
}

impl Liveness {
    fn new(bounds: &StreamBounds, delivery_timeout: Duration) -> Self {
        let now = std::time::Instant::now();
        let grace = bounds.idle + delivery_timeout;
        Self {
            deadline: StreamDeadline::new(now + grace),
            grace,
            cap: now + bounds.max_duration + grace,
        }
    }

    fn touch(&self) {
        let now = std::time::Instant::now();
        self.deadline.set((now + self.grace).min(self.cap));
    }
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

impl Ingest {
    /// Opens a stream: the checks every produce request gets before its body, then the first
    /// piece of the body (an error there is the whole request's answer). Returns the tenant
    /// once authenticated and the stream's reports; the stream runs on its own task.
    pub async fn open_stream<P: RecordNotes + RecordSchemas + 'static>(
        self: &Arc<Self>,
        request: StreamRequest<'_>,
        parser: Result<P, ApiError>,
    ) -> (Option<Arc<Tenant>>, Result<Reports<P::Note>, ApiError>) {
        let who = match self.identify(&request.peer, request.headers).await {
            Ok(who) => who,
            Err(e) => return (None, Err(e)),
        };
        let tenant = who.tenant.clone();
        let api = request.api;
        let opened = match super::credential_allows(&who, request.topic) {
            Err(e) => Err(e),
            Ok(()) => self.open_for(&tenant, who, request, parser).await,
        };
        tenant.stats().count_api(api, opened.is_ok());
        (Some(tenant), opened)
    }

    async fn open_for<P: RecordNotes + RecordSchemas + 'static>(
        self: &Arc<Self>,
        tenant: &Arc<Tenant>,
        who: Identity,
        request: StreamRequest<'_>,
        parser: Result<P, ApiError>,
    ) -> Result<Reports<P::Note>, ApiError> {
        let topic = self.topic(tenant, request.topic)?;
        let parser = parser?;
        // A stream's records are answered one by one as they are written, so there is no one
        // answer to keep and replay: refused rather than ignored, as a client that sends a key
        // counts on at most once.
        if request.headers.contains_key(crate::idempotency::HEADER) {
            return Err(ApiError::IdempotencyKey(
                "Idempotency-Key: not taken on a stream of records (.../records); send the \
                 records as one records:batch request, whose answer a retry gets again"
                    .into(),
            ));
        }
        // Could one record be admitted now? (A stream's length bounds nothing per record:
        // its records are admitted one by one, each within `max_body_bytes`.)
        self.admission
            .precheck_to(tenant, Some(&topic), 1)
            .map_err(|refusal| refused(tenant, refusal))?;
        self.check_topic(&topic, &[]).await?;
        let hold = self
            .body_budget
            .hold(tenant.body_bytes.clone(), tenant.buffer_share());
        let memory = Arc::new(Memory::open(hold).ok_or_else(|| self.busy(tenant))?);
        let max_text = usize::try_from(self.max_body_bytes).unwrap_or(usize::MAX);
        let decoder = Decoder::streaming(Framing::Concatenated, parser, &self.bounds, max_text);
        let (queue, reports) = mpsc::channel(self.streams.max_unsettled.max(1));
        let liveness = Arc::new(Liveness::new(&self.streams, self.delivery_timeout));
        let mut pump = Pump {
            ingest: self.clone(),
            tenant: tenant.clone(),
            who,
            topic,
            generation: (self.tenants.generation(), self.auth.keys_generation()),
            checked: Instant::now(),
            decoder,
            queue,
            memory: memory.clone(),
            liveness: liveness.clone(),
            ends: Instant::now() + self.streams.max_duration,
            last_data: Instant::now(),
            draining: self.draining.subscribe(),
            rest: Bytes::new(),
            numbered: 0,
            lookups: crate::schema::Lookups::per_request(),
            lookups_since: Instant::now(),
        };
        let mut body = request.body;
        // The first data decides whether there is a stream at all: bytes that are not a record
        // are answered as a whole-request error, as for a single record (as far as the report
        // queue has room for its records).
        let first = first_data(&mut body, self.streams.idle).await?;
        if !pump.memory.set(first.len(), 0) {
            return Err(pump.busy());
        }
        pump.rest = first;
        let room = pump.queue.capacity();
        while !pump.rest.is_empty() && pump.decoder.decoded() < room {
            pump.decode_piece(room)?;
        }
        if pump.decoder.decoded() == 0
            && !pump.decoder.in_record()
            && axum::body::HttpBody::is_end_stream(&body)
        {
            return Err(ApiError::NoRecords);
        }
        // One whole record, not a stream: its schema is checked now, so a record that does
        // not fit is answered with its status, as a record that does not decode is.
        if pump.decoder.decoded() == 1
            && !pump.decoder.in_record()
            && axum::body::HttpBody::is_end_stream(&body)
        {
            let wanted = pump.decoder.parser().wanted_at(0);
            if self.schemas.applies(&pump.topic, wanted.as_slice()) {
                if let Some(record) = pump.decoder.pending().records().first() {
                    let mut lookups = crate::schema::Lookups::per_request();
                    self.convert_record(
                        tenant,
                        &pump.topic,
                        0,
                        record,
                        wanted.as_ref(),
                        &mut lookups,
                    )
                    .await?;
                }
            }
        }
        tokio::spawn(pump.run(body));
        Ok(Reports {
            queue: reports,
            head: None,
            memory,
            window: Arc::new(Semaphore::new(REPORT_WINDOW)),
            liveness,
            delivery_timeout: self.delivery_timeout,
        })
    }
}

/// The first data of a stream's body.
async fn first_data(body: &mut Body, idle: Duration) -> Result<Bytes, ApiError> {
    loop {
        match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(ApiError::BodyTimeout),
            Ok(None) => return Err(ApiError::NoRecords),
            Ok(Some(Err(e))) => {
                return Err(ApiError::Malformed(format!(
                    "the body could not be read: {e}"
                )))
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(data);
                }
            }
        }
    }
}

/// Reads a stream, admits and sends its records, and queues their reports.
struct Pump<P: RecordNotes + RecordSchemas> {
    ingest: Arc<Ingest>,
    tenant: Arc<Tenant>,
    /// The credential the stream was opened with, checked again on registry changes and as
    /// time passes (a JWT's `exp`, a certificate's notAfter end the stream's authority).
    who: Identity,
    topic: Topic,
    /// The registry's and the token issuers' key sets' generations last checked, and when.
    generation: (u64, u64),
    checked: Instant,
    decoder: Decoder<P>,
    queue: mpsc::Sender<Queued<P::Note>>,
    memory: Arc<Memory>,
    liveness: Arc<Liveness>,
    /// When the stream reaches its longest time.
    ends: Instant,
    /// When the client's last bytes arrived.
    last_data: Instant,
    draining: watch::Receiver<bool>,
    /// What has arrived and is not decoded yet.
    rest: Bytes,
    /// Records of the stream taken to admission so far (a record's number in errors).
    numbered: usize,
    /// Registry calls the stream may still cause (a stream naming ever new schemas is
    /// refused past them, record by record).
    lookups: crate::schema::Lookups,
    /// When the stream's registry calls were last given back.
    lookups_since: Instant,
}

/// Why the pump stopped: the client is gone or done (nothing more to say), or this error.
type Stopped = Option<ApiError>;

impl<P: RecordNotes + RecordSchemas + 'static> Pump<P> {
    async fn run(mut self, mut body: Body) {
        let end = self.pump(&mut body).await;
        let Some(error) = end else {
            return; // the body ended (or broke off): nothing more will come
        };
        self.end(error).await;
        // Done with decoding: what the pump held goes back; the reports end once every queued
        // one is out (the queue closes with the pump).
        self.memory.set(0, 0);
        let reports = Arc::downgrade(&self.memory);
        drop(self);
        linger(body, reports).await;
    }

    async fn pump(&mut self, body: &mut Body) -> Stopped {
        loop {
            if let Err(e) = self.recheck() {
                return Some(e);
            }
            if !self.rest.is_empty() || self.decoder.decoded() > 0 {
                if let Err(stopped) = self.work().await {
                    return stopped;
                }
                continue;
            }
            let until = self.until();
            tokio::select! {
                biased;
                () = draining(&mut self.draining) => return Some(ApiError::ShuttingDown),
                frame = tokio::time::timeout_at(until, body.frame()) => match frame {
                    Err(_) => return Some(self.timed_out()),
                    Ok(None) => return self.finish().await,
                    // The client went away, or its body broke off: nothing to say to it.
                    Ok(Some(Err(_))) => return None,
                    Ok(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            self.last_data = Instant::now();
                            self.liveness.touch();
                            if !self.memory.set(self.decoder.footprint() + data.len(), 0) {
                                return Some(self.busy());
                            }
                            self.rest = data;
                        }
                    }
                },
                () = tokio::time::sleep(RECHECK) => {}
            }
        }
    }

    /// When waiting must end: the idle time after the last bytes, or the longest time.
    fn until(&self) -> Instant {
        (self.last_data + self.ingest.streams.idle).min(self.ends)
    }

    fn timed_out(&self) -> ApiError {
        if Instant::now() >= self.ends {
            ApiError::StreamTooLong(millis(self.ingest.streams.max_duration))
        } else {
            ApiError::StreamIdle(millis(self.ingest.streams.idle))
        }
    }

    /// The credential still belongs to this tenant and is still valid, and the topic is still
    /// the tenant's, checked on every registry change and at least once a second.
    fn recheck(&mut self) -> Result<(), ApiError> {
        let generation = (
            self.ingest.tenants.generation(),
            self.ingest.auth.keys_generation(),
        );
        if generation == self.generation && self.checked.elapsed() < RECHECK {
            return Ok(());
        }
        self.generation = generation;
        self.checked = Instant::now();
        let registry = self.ingest.tenants.load();
        match self.ingest.auth.still_valid(&registry, &self.who) {
            Ok(()) => {}
            // A revoked key, a remapped token or certificate: as before, "revoked".
            Err(AuthError::Unauthorized | AuthError::UnknownTenant(_)) => {
                return Err(ApiError::CredentialRevoked)
            }
            Err(e) => return Err(ApiError::Auth(e)),
        }
        if !self.who.may_write(&self.topic) {
            return Err(ApiError::ForbiddenTopic(self.topic.as_str().to_string()));
        }
        Ok(())
    }

    /// Decodes what has arrived as far as the report queue has room, admits and sends it.
    async fn work(&mut self) -> Result<(), Stopped> {
        let room = self.room().await?;
        let mut failed = None;
        while !self.rest.is_empty() && self.decoder.decoded() < room {
            if let Err(e) = self.decode_piece(room) {
                failed = Some(e);
                break;
            }
        }
        self.admit_decoded().await?;
        match failed {
            Some(e) => Err(Some(e)),
            None => Ok(()),
        }
    }

    /// Waits until the report queue has room for a record (within the stream's time); how
    /// much room it has.
    async fn room(&mut self) -> Result<usize, Stopped> {
        if self.queue.capacity() == 0 {
            // What has arrived may be a slice of the connection's read buffer: a copy of it
            // (held) lets that buffer go while the client's reports are awaited.
            if !self.rest.is_empty() {
                self.rest = Bytes::copy_from_slice(&self.rest);
            }
            let until = self.until();
            tokio::select! {
                biased;
                () = draining(&mut self.draining) => return Err(Some(ApiError::ShuttingDown)),
                permit = tokio::time::timeout_at(until, self.queue.reserve()) => match permit {
                    Err(_) => return Err(Some(self.timed_out())),
                    Ok(Err(_)) => return Err(None), // the client went away
                    Ok(Ok(permit)) => drop(permit),
                },
            }
        }
        Ok(self.queue.capacity())
    }

    /// Decodes the next piece of what has arrived: never more records than `room` in all
    /// (a record needs at least two bytes of text, and one may be finished from before), and
    /// only once its most memory is held.
    fn decode_piece(&mut self, room: usize) -> Result<(), ApiError> {
        let decoded = self.decoder.decoded();
        let free = room.saturating_sub(decoded).max(1);
        let n = (2 * free - 1).min(PIECE_MAX).min(self.rest.len());
        // Growing buffers may double: the tail and the arena's bytes at most twice what they
        // will hold. What has arrived stays held until it is decoded.
        let most =
            2 * (self.decoder.footprint() + n) + RecordArena::index_bound(n) + self.rest.len();
        let entries = cost_bound::<P::Note>(decoded + n / 2 + 1);
        if !self.memory.set(most.saturating_add(entries), 0) {
            return Err(self.busy());
        }
        let piece = self.rest.split_to(n);
        self.decoder
            .push(&piece)
            .map(|_| ())
            .map_err(ApiError::from)
    }

    /// A 429 `server_busy`: the body budget cannot hold what the stream must keep.
    fn busy(&self) -> ApiError {
        let busy = self.ingest.busy(&self.tenant);
        self.ingest.cut_short(Cut::ServerBusy, busy)
    }

    /// The body has ended: the last records, or the error of a record cut short.
    async fn finish(&mut self) -> Stopped {
        if let Err(e) = self.decoder.finish_stream() {
            return Some(e.into());
        }
        if let Err(stopped) = self.admit_decoded().await {
            return stopped;
        }
        None
    }

    /// Admits each decoded record on its own, sends the admitted ones as one batch, and queues
    /// every record's report in order.
    async fn admit_decoded(&mut self) -> Result<(), Stopped> {
        if let Err(e) = self.recheck() {
            return Err(Some(e));
        }
        let arena = self.decoder.take_decoded();
        let notes = self.decoder.parser().take_notes();
        // A stream's parser names each record's schema itself (it cannot refuse the lot).
        let wanted = self
            .decoder
            .parser()
            .take_wanted(&arena.records())
            .unwrap_or_default();
        // The stream's registry calls come back once a minute: a long stream re-reads a
        // subject's latest schema as it is refreshed, a flood of new schemas stays bounded.
        if self.lookups_since.elapsed() >= LOOKUPS_REFILL {
            self.lookups = crate::schema::Lookups::per_request();
            self.lookups_since = Instant::now();
        }
        let mut lookups = std::mem::replace(&mut self.lookups, crate::schema::Lookups::none());
        let (batch, fates) = self.admit(&arena, &wanted, &mut lookups).await;
        self.lookups = lookups;
        self.numbered += notes.len();
        let mut queued = 0u64;
        let mut last: Option<Arc<ApiError>> = None;
        let mut entries = Vec::with_capacity(fates.len());
        for (fate, note) in fates.into_iter().zip(notes) {
            let mut entry_cost = cost::<P::Note>(None);
            let fate = match fate {
                Ok(index) => match &batch {
                    Some(batch) => Fate::Sent {
                        batch: batch.clone(),
                        index,
                    },
                    // Admitted records are always sent together; unreachable in practice.
                    None => Fate::Refused(Arc::new(ApiError::KafkaUnavailable(
                        "the record was not sent".into(),
                    ))),
                },
                Err(error) => {
                    let shared = last.as_ref().filter(|l| same_refusal(l, &error)).cloned();
                    let error = shared.unwrap_or_else(|| {
                        entry_cost = cost::<P::Note>(Some(&error));
                        Arc::new(error)
                    });
                    last = Some(error.clone());
                    Fate::Refused(error)
                }
            };
            queued += u64::from(entry_cost);
            entries.push(Queued::Record {
                fate,
                note,
                cost: entry_cost,
            });
        }
        drop(arena);
        // What was reserved for the decoded records is now the queue's (never more).
        self.memory
            .set(self.decoder.footprint() + self.rest.len(), queued);
        for entry in entries {
            if self.queue.try_send(entry).is_err() {
                return Err(None); // the client went away (room was checked before decoding)
            }
        }
        Ok(())
    }

    /// Each record's fate: its index in the batch sent, or why it was refused.
    async fn admit(
        &self,
        arena: &RecordArena,
        wanted: &[crate::schema::Wanted],
        lookups: &mut crate::schema::Lookups,
    ) -> (Option<Arc<Batch>>, Vec<Result<u32, ApiError>>) {
        let records = arena.records();
        if records.is_empty() {
            return (None, Vec::new());
        }
        let ingest = &self.ingest;
        // The schema step, record by record: a record that does not fit is refused alone.
        let mut converted: Vec<Option<Result<Record<'static>, ApiError>>> = Vec::new();
        if ingest.schemas.applies(&self.topic, wanted) {
            // What the records become is held against the stream's share of the body budget
            // while they wait to be sent, on top of the records decoded.
            let base = usize::try_from(self.memory.decoding()).unwrap_or(usize::MAX);
            let mut extra = 0usize;
            for (i, r) in records.iter().enumerate() {
                let number = self.numbered + i;
                let c = ingest
                    .convert_record(&self.tenant, &self.topic, number, r, wanted.get(i), lookups)
                    .await;
                let c = c.and_then(|c| {
                    let size = usize::try_from(c.record.size()).unwrap_or(usize::MAX);
                    if self
                        .memory
                        .set(base.saturating_add(extra).saturating_add(size), 0)
                    {
                        extra += size;
                        Ok(c)
                    } else {
                        Err(self.busy())
                    }
                });
                converted.push(Some(c.map(|c| c.record)));
            }
        }
        let partitions = match ingest.catalog.lookup(self.topic.as_str()).await {
            Ok(TopicInfo::Exists { partitions }) => Ok(partitions),
            Ok(TopicInfo::Missing) => Err(ApiError::UnknownTopic(self.topic.as_str().into())),
            Err(e) => Err(ApiError::KafkaUnavailable(e)),
        };
        // One lease call for the whole group, at most, made up front for all of it (what the
        // slices lack for the group, taken in part if Redis has less): the group's records are
        // then admitted one by one from the slices, and a stream far over its budget costs
        // Redis nothing per record.
        let mut leases = 1;
        if let Some(cluster) = &ingest.cluster {
            let group = if converted.is_empty() {
                arena.charge()
            } else {
                let mut charge = Charge::default();
                for c in converted.iter().flatten().flatten() {
                    charge.records += 1;
                    charge.bytes += c.size();
                }
                charge
            };
            let need = ingest
                .admission
                .lease_need(&self.tenant, Some(&self.topic), group);
            if let Some(need) = need {
                leases = 0;
                // A refusal here (Redis has nothing) is what each record's check then says.
                let _ = cluster.lease_for(&self.tenant, need).await;
            }
        }
        let mut lease: Option<BufferLease> = None;
        let mut admitted: Vec<Record<'_>> = Vec::with_capacity(records.len());
        let mut fates = Vec::with_capacity(records.len());
        for (i, record) in records.into_iter().enumerate() {
            let record = match converted.get_mut(i).and_then(Option::take) {
                None => Ok(record),
                Some(c) => c,
            };
            let fate = match (&partitions, record) {
                (_, Err(e)) => Err(e),
                (Err(e), _) => Err(e.clone()),
                (Ok(n), Ok(record)) => match record.partition.filter(|p| *p as u32 >= *n) {
                    Some(p) => Err(ApiError::UnknownPartition(format!(
                        "partition {p} does not exist (the topic has {n})"
                    ))),
                    None => match self.admit_one(&record, &mut leases).await {
                        Ok(taken) => Ok((taken, record)),
                        Err(e) => Err(e),
                    },
                },
            };
            fates.push(fate.map(|(taken, record)| {
                match lease.as_mut() {
                    None => lease = Some(taken),
                    // Same buffer, same tenant: always absorbed; were it not, its space is
                    // given back here, and the record still travels under the group's lease.
                    Some(held) => drop(held.absorb(taken)),
                }
                admitted.push(record);
                (admitted.len() - 1) as u32
            }));
        }
        let batch = lease.map(|lease| ingest.send(&self.tenant, &self.topic, &admitted, lease));
        (batch, fates)
    }

    /// One record: checked against every budget first (a record the tenant's own budgets
    /// refuse is not demand and costs no lease call), then admitted.
    async fn admit_one(
        &self,
        record: &Record<'_>,
        leases: &mut u32,
    ) -> Result<BufferLease, ApiError> {
        let ingest = &self.ingest;
        let charge = Charge::of(std::slice::from_ref(record));
        if let Err(denial) = ingest
            .admission
            .check_to(&self.tenant, Some(&self.topic), charge)
        {
            if let Denial::Refused(r) = &denial {
                self.tenant.stats().refused_records(1);
                // Refused by a limit below the tenant's own budget: it is demand that limit
                // should see.
                if matches!(
                    r.reason,
                    crate::refusal::Reason::Adaptive | crate::refusal::Reason::ConsumerLag
                ) {
                    self.tenant.stats().offered(charge.records, charge.bytes);
                }
            }
            return Err(ingest.denied(&self.tenant, denial));
        }
        ingest
            .admit_with(&self.tenant, &self.topic, charge, leases)
            .await
    }

    /// The stream's last report (held from the start), when the queue takes it within the
    /// stream's idle time.
    async fn end(&mut self, error: ApiError) {
        self.rest = Bytes::new();
        self.memory.set(self.decoder.footprint(), 0);
        let until = Instant::now() + self.ingest.streams.idle;
        let end = Queued::End(Arc::new(error), 0);
        let _ = tokio::time::timeout_at(until, self.queue.send(end)).await;
    }
}

/// A stream ended early while its client may still be sending: closing on its unread bytes
/// would reset the connection, and the client's kernel would throw away the reports it has not
/// read yet — records written without their 200, retried, written twice. So the rest of the
/// body is read and dropped until the reports are out (`reports` — the stream's memory, held
/// by its reports and their frames — is gone) and a moment more for the client to read them,
/// within [`LINGER_MAX`] and [`LINGER_BYTES`]. Nothing read here is kept or held.
async fn linger(mut body: Body, reports: std::sync::Weak<Memory>) {
    let started = Instant::now();
    let mut reports_out: Option<Instant> = None;
    let mut read = 0u64;
    while started.elapsed() < LINGER_MAX && read < LINGER_BYTES {
        if reports_out.is_none() && reports.strong_count() == 0 {
            reports_out = Some(Instant::now());
        }
        if reports_out.is_some_and(|at| at.elapsed() >= LINGER_AFTER) {
            return;
        }
        match tokio::time::timeout(Duration::from_millis(50), body.frame()).await {
            Ok(Some(Ok(frame))) => read += frame.data_ref().map_or(0, |d| d.len() as u64),
            Ok(_) => return, // the body ended or the client went away
            Err(_) => {}
        }
    }
}

/// Two refusals a report may share: the same error, or the same kind of 429 (the first one's
/// wait is never shorter than a later one's: a refused record takes no tokens).
fn same_refusal(a: &ApiError, b: &ApiError) -> bool {
    match (a, b) {
        (ApiError::RateLimited(x), ApiError::RateLimited(y)) => {
            x.reason == y.reason && x.class == y.class && x.lag == y.lag
        }
        _ => a == b,
    }
}

/// Resolves once shutdown has started.
async fn draining(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|draining| *draining).await.is_err() {
        // The gateway is gone: there is nothing left to drain for.
        std::future::pending::<()>().await;
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
