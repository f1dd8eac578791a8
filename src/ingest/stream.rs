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

mod admit;
mod memory;
mod pump;
mod reports;

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use http_body_util::BodyExt as _;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::contracts::ToConvert;
use super::{Api, Ingest, RecordSchemas};
use crate::admission::BucketsView;
use crate::body::{Decoder, Framing, RecordNotes};
use crate::credential::Identity;
use crate::outcome::ApiError;
use crate::record::Charge;
use crate::schema::Lookups;
use crate::tenant::Tenant;
use admit::First;
use memory::Memory;
use pump::Pump;
#[cfg(test)]
use reports::cost;
use reports::Liveness;
pub use reports::{Report, Reports, Said};

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

impl Ingest {
    /// Opens a stream: the checks every produce request gets before its body, then the first
    /// piece of the body (an error there is the whole request's answer). Returns the tenant's
    /// buckets once it is authenticated (the answer's RateLimit fields: the adapter attaches
    /// them to its response) and the stream's reports; the stream runs on its own task.
    pub async fn open_stream<P: RecordNotes + RecordSchemas + 'static>(
        self: &Arc<Self>,
        request: StreamRequest<'_>,
        parser: Result<P, ApiError>,
    ) -> (Option<BucketsView>, Result<Reports<P::Note>, ApiError>) {
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
        (Some(self.view(&tenant)), opened)
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
        self.open_check(tenant, &topic).await?;
        self.check_topic(&topic, std::iter::empty()).await?;
        let codings = super::coding::codings(request.headers)?;
        let hold = self
            .inflight_bodies
            .hold(tenant.body_bytes.clone(), tenant.buffer_share());
        let (memory, cut) = Memory::open(hold).ok_or_else(|| self.busy(tenant))?;
        let memory = Arc::new(memory);
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
            lookups: Lookups::per_request(tenant.id.as_str()),
            lookups_since: Instant::now(),
            drain: super::coding::Drain::default(),
            first: None,
            work: Default::default(),
            refusals_owed: false,
            cut,
        };
        let (mut body, drain) = self.decoded_body(tenant, request.body, codings, true);
        pump.drain = drain;
        self.first_piece(tenant, &mut pump, &mut body).await?;
        tokio::spawn(pump.run(body));
        Ok(Reports::new(
            reports,
            memory,
            liveness,
            self.delivery_timeout,
        ))
    }

    /// The first data decides whether there is a stream at all: bytes that are not a record
    /// are answered as a whole-request error, as for a single record (as far as the report
    /// queue has room for its records).
    async fn first_piece<P: RecordNotes + RecordSchemas + 'static>(
        &self,
        tenant: &Arc<Tenant>,
        pump: &mut Pump<P>,
        body: &mut Body,
    ) -> Result<(), ApiError> {
        let first = first_data(body, self.streams.idle)
            .await?
            .map_err(|e| self.unreadable(Some(tenant), &e))?;
        if !pump.memory.set(first.len(), 0) {
            return Err(pump.busy());
        }
        pump.rest = first;
        let room = pump.queue.capacity();
        while !pump.rest.is_empty() && pump.decoder.decoded() < room {
            pump.decode_piece(room)?;
        }
        let whole = !pump.decoder.in_record() && axum::body::HttpBody::is_end_stream(body);
        if whole && pump.decoder.decoded() == 0 {
            return Err(ApiError::NoRecords);
        }
        // One whole record, not a stream: its schema is checked now and what it needs of its
        // tenant reserved, so a record that does not fit, or that its budgets refuse, is
        // answered with its status, as a record that does not decode is (review 41-r9 of #37:
        // concurrent single records were refused by admission under 200, in the report).
        if whole && pump.decoder.decoded() == 1 {
            let wanted = pump.decoder.parser().wanted_at(0);
            let records = pump.decoder.pending().records();
            let to_convert = ToConvert {
                records: &records[..records.len().min(1)],
                wanted: wanted.as_slice(),
                first: 0,
                whole: false,
            };
            let mut lookups = Lookups::per_request(tenant.id.as_str());
            let mut first = None;
            self.convert_each(tenant, &pump.topic, to_convert, &mut lookups, |_, c| {
                first = Some(c?);
                Ok(())
            })
            .await?;
            let mut first = First {
                converted: first,
                reserved: None,
            };
            let charge = match &first.converted {
                Some(c) if c.reserved.is_some() => None,
                Some(c) => Some(Charge::of(std::slice::from_ref(&c.record))),
                None => Some(Charge::of(&records[..records.len().min(1)])),
            };
            if let Some(charge) = charge {
                let reserved = self.reserve(tenant, &pump.topic, charge).await?;
                match first.converted.as_mut() {
                    Some(c) => c.reserved = Some(reserved),
                    None => first.reserved = Some(reserved),
                }
            }
            pump.first = Some(first);
        }
        Ok(())
    }
}

/// The first data of a stream's body, or the error it broke off with.
async fn first_data(
    body: &mut Body,
    idle: Duration,
) -> Result<Result<Bytes, axum::Error>, ApiError> {
    loop {
        match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(ApiError::BodyTimeout),
            Ok(None) => return Err(ApiError::NoRecords),
            Ok(Some(Err(e))) => return Ok(Err(e)),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Ok(data));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
