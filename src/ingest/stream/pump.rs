//! The pump: the task that owns an open stream until it ends. It reads the body, decodes it a
//! piece at a time within the report queue's room, re-checks the key and the topic, and ends
//! the stream on idleness, its longest time or shutdown.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt as _;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::memory::Memory;
use super::reports::cost_bound;
use super::reports::{Liveness, Queued};
use super::{LINGER_AFTER, LINGER_BYTES, LINGER_MAX, PIECE_MAX, RECHECK};
use crate::body::{Decoder, RecordArena, RecordNotes};
use crate::credential::{AuthError, Identity};
use crate::identity::Topic;
use crate::inflight_bodies::{Cut, CutSignal};
use crate::ingest::reading::{
    too_costly, unpaid_refusal, LingerBill, Reading, StreamWork, NS_PER_STREAM_PIECE,
};
use crate::ingest::{Ingest, RecordSchemas};
use crate::outcome::ApiError;
use crate::tenant::Tenant;

/// Reads a stream, admits and sends its records, and queues their reports.
pub(super) struct Pump<P: RecordNotes + RecordSchemas> {
    pub(super) ingest: Arc<Ingest>,
    pub(super) tenant: Arc<Tenant>,
    /// The credential the stream was opened with, checked again on registry changes and as
    /// time passes (a JWT's `exp`, a certificate's notAfter end the stream's authority).
    pub(super) who: Identity,
    pub(super) topic: Topic,
    /// The registry's and the token issuers' key sets' generations last checked, and when.
    pub(super) generation: (u64, u64),
    pub(super) checked: Instant,
    pub(super) decoder: Decoder<P>,
    pub(super) queue: mpsc::Sender<Queued<P::Note>>,
    pub(super) memory: Arc<Memory>,
    pub(super) liveness: Arc<Liveness>,
    /// When the stream reaches its longest time.
    pub(super) ends: Instant,
    /// When the client's last bytes arrived.
    pub(super) last_data: Instant,
    pub(super) draining: watch::Receiver<bool>,
    /// What has arrived and is not decoded yet.
    pub(super) rest: Bytes,
    /// Records of the stream taken to admission so far (a record's number in errors).
    pub(super) numbered: usize,
    /// Registry calls the stream may still cause (a stream naming ever new schemas is
    /// refused past them, record by record).
    pub(super) lookups: crate::schema::Lookups,
    /// When the stream's registry calls were last given back.
    pub(super) lookups_since: Instant,
    /// Started when the stream ends early: a coded body's rest is drained as it came.
    pub(super) drain: crate::ingest::coding::Drain,
    /// A body of one record, converted and its tokens reserved before the stream was
    /// answered: admitted as it is, not converted twice.
    pub(super) first: Option<super::admit::First>,
    /// What reading the stream costs until its records are decided (`ingest::reading`).
    pub(super) work: StreamWork,
    /// Records were refused since the tenant's unpaid work was last asked.
    pub(super) refusals_owed: bool,
    /// Resolves once the stream was cut to make room in the body budget for a tenant under
    /// its equal share (`inflight_bodies::room`). Looked at only where the pump waits (for
    /// the client's bytes or the report queue's room), never while records are being
    /// admitted and sent: each admitted record keeps its report.
    pub(super) cut: CutSignal,
}

/// Why the pump stopped: the client is gone or done (nothing more to say), or this error.
pub(super) type Stopped = Option<ApiError>;

impl<P: RecordNotes + RecordSchemas + 'static> Pump<P> {
    pub(super) async fn run(mut self, mut body: Body) {
        let end = self.pump(&mut body).await;
        // However the stream ended, the pieces of a record it never decided were read unpaid.
        let owed = self.work.take_unsettled();
        if !owed.is_zero() {
            self.ingest
                .schemas
                .charge_unpaid(self.tenant.id.as_str(), owed);
        }
        let Some(error) = end else {
            return; // the body ended (or broke off): nothing more will come
        };
        self.drain.start();
        self.end(error).await;
        // Done with decoding: what the pump held goes back; the reports end once every queued
        // one is out (the queue closes with the pump).
        self.memory.set(0, 0);
        let reports = Arc::downgrade(&self.memory);
        let payer = (self.ingest.clone(), self.tenant.clone());
        drop(self);
        linger(body, reports, &payer).await;
    }

    async fn pump(&mut self, body: &mut Body) -> Stopped {
        loop {
            if let Err(e) = self.recheck() {
                return Some(e);
            }
            if !self.rest.is_empty() || self.decoder.decoded() > 0 {
                let ended = axum::body::HttpBody::is_end_stream(body);
                if let Err(stopped) = self.work(ended).await {
                    return stopped;
                }
                continue;
            }
            let until = self.until();
            tokio::select! {
                biased;
                () = draining(&mut self.draining) => return Some(ApiError::ShuttingDown),
                () = &mut self.cut => return Some(self.made_room()),
                frame = tokio::time::timeout_at(until, body.frame()) => match frame {
                    Err(_) => return Some(self.timed_out()),
                    Ok(None) => return self.finish().await,
                    // The client went away, or its body broke off: nothing to say to it;
                    // unless its coding refused it (invalid, or inflating past a bound).
                    Ok(Some(Err(e))) => {
                        return self.ingest.coding_refusal(Some(&self.tenant), &e)
                    }
                    Ok(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            if let Err(e) = self.reading(data.len()) {
                                return Some(e);
                            }
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

    /// A piece of `len` bytes arrived: read on only while its tenant's unpaid work allows, and
    /// while the pieces of the records not yet decided cost less than a request may owe.
    fn reading(&mut self, len: usize) -> Result<(), ApiError> {
        let schemas = &self.ingest.schemas;
        match self.work.read(len, schemas.most_owed()) {
            Reading::On => Ok(()),
            Reading::Ask => {
                let tenant = self.tenant.id.as_str();
                schemas.charge_unpaid(tenant, self.work.take_unsettled());
                schemas
                    .unpaid_allows(tenant)
                    .map_err(|e| self.ingest.cut_short(Cut::RateLimited, unpaid_refusal(&e)))
            }
            Reading::TooCostly(most) => Err(self
                .ingest
                .cut_short(Cut::Malformed, too_costly(most, NS_PER_STREAM_PIECE))),
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
    pub(super) fn recheck(&mut self) -> Result<(), ApiError> {
        let generation = (
            self.ingest.tenants.generation(),
            self.ingest.auth.keys_generation(),
        );
        if generation == self.generation && self.checked.elapsed() < RECHECK {
            return Ok(());
        }
        self.generation = generation;
        self.checked = Instant::now();
        let directory = self.ingest.tenants.load();
        match self.ingest.auth.still_valid(&directory, &self.who) {
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

    /// Decodes what has arrived as far as the report queue has room, admits and sends it. A
    /// stream whose refusals spent its tenant's unpaid work ends there, unless its body has
    /// ended anyway: records that take no token (a partition that does not exist) would
    /// otherwise be refused for free for as long as it lasts (review 38a of #37: 511,400 in
    /// 10 s, a core).
    async fn work(&mut self, ended: bool) -> Result<(), Stopped> {
        let room = self.room().await?;
        let mut failed = None;
        while !self.rest.is_empty() && self.decoder.decoded() < room {
            if let Err(e) = self.decode_piece(room) {
                failed = Some(e);
                break;
            }
        }
        self.admit_decoded().await?;
        if std::mem::take(&mut self.refusals_owed) && !ended {
            let tenant = self.tenant.id.as_str();
            if let Err(e) = self.ingest.schemas.unpaid_allows(tenant) {
                let e = unpaid_refusal(&e);
                return Err(Some(self.ingest.cut_short(Cut::RateLimited, e)));
            }
        }
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
                () = &mut self.cut => return Err(Some(self.made_room())),
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
    pub(super) fn decode_piece(&mut self, room: usize) -> Result<(), ApiError> {
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
    pub(super) fn busy(&self) -> ApiError {
        let busy = self.ingest.busy(&self.tenant);
        self.ingest.cut_short(Cut::ServerBusy, busy)
    }

    /// A 429 `server_busy`: the stream was cut to make room for a newcomer.
    fn made_room(&self) -> ApiError {
        let busy = self.ingest.busy(&self.tenant);
        self.ingest.cut_short(Cut::MadeRoom, busy)
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

    /// The stream's last report (held from the start), when the queue takes it within the
    /// stream's idle time.
    async fn end(&mut self, error: ApiError) {
        self.liveness.ended();
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
///
/// What it reads is its tenant's unpaid work, charged as it goes: a tenant whose unpaid work is
/// spent is not read for (review 38a of #37: ~1 s of CPU per stream in 1-byte pieces).
async fn linger(
    mut body: Body,
    reports: std::sync::Weak<Memory>,
    payer: &(Arc<Ingest>, Arc<Tenant>),
) {
    let started = Instant::now();
    let mut reports_out: Option<Instant> = None;
    let mut read = 0u64;
    let (ingest, tenant) = payer;
    let mut bill = LingerBill::new(&ingest.schemas, tenant.id.as_str(), NS_PER_STREAM_PIECE);
    while started.elapsed() < LINGER_MAX && read < LINGER_BYTES {
        if reports_out.is_none() && reports.strong_count() == 0 {
            reports_out = Some(Instant::now());
        }
        if reports_out.is_some_and(|at| at.elapsed() >= LINGER_AFTER) {
            return;
        }
        match tokio::time::timeout(Duration::from_millis(50), body.frame()).await {
            Ok(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                read += len;
                if !bill.read(len) {
                    return;
                }
            }
            Ok(_) => return, // the body ended or the client went away
            Err(_) => {}
        }
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
