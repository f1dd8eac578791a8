//! Reading a request's body: decoded as it arrives, held against the body budget, checked
//! against the tenant's budgets after every chunk but the last (admission itself comes
//! next), and cut short the moment it cannot be admitted. A request refused early has its body drained if small, or read on for a moment
//! (lingering), so the client hears the answer rather than a reset.

use std::time::Duration;

use axum::body::Body;
use axum::body::HttpBody as _;
use axum::http::{header, HeaderMap};
use http_body_util::BodyExt;

use super::frames::{Frames, Stopped};
use super::{refused, Answer, BodyFormat, Held, Ingest, ProduceRequest};
use crate::body::{BodyError, Decoder, RecordArena};
use crate::idempotency::Fingerprinter;
use crate::identity::Topic;
use crate::inflight_bodies::{BodyHold, Cut};
use crate::outcome::ApiError;
use crate::record::Charge;
use crate::refusal::{Denial, Reason, Refusal};
use crate::tenant::Tenant;

impl Ingest {
    /// Reads and decodes the body as it arrives, within `max_body_bytes` and
    /// `body_read_timeout`, held against the body budget as it arrives (a declared length
    /// that does not fit now is refused before the first byte is read; the hold is given
    /// back when dropped). After every chunk the records decoded so far are checked against
    /// the tenant's budgets, its buffer share and the buffer: the moment they cannot be
    /// admitted, the request is refused and the rest of the body is never read — unless, with
    /// `[wait]`, they are short only of tokens due within `max_ms` and the request has (or
    /// takes now) a seat in the waiting room (`held`, kept until admission).
    ///
    /// A tenant's bodies together may hold at most its `max_buffer_share` of the budget. An
    /// upload refused before its end is read on (and discarded) for a moment after the answer
    /// is sent — see [`linger`] — so the client sees the answer instead of a reset.
    #[allow(clippy::too_many_arguments)] // one call site: the request's parts, passed through
    pub(super) async fn read_records<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        mut body: Body,
        declared: Option<u64>,
        format: BodyFormat<'_>,
        print: Option<&mut Fingerprinter>,
        held: &mut Held<'a>,
    ) -> Result<(RecordArena, BodyHold, BodyOwed<'a>), ApiError> {
        let mut hold = self
            .inflight_bodies
            .hold(tenant.body_bytes.clone(), tenant.buffer_share());
        hold.watch_while_reading();
        // What reading the body costs is owed until admission pays (see `BodyWork`).
        let mut owed = BodyOwed {
            schemas: &self.schemas,
            tenant: tenant.id.as_str(),
            cost: Duration::ZERO,
        };
        match self
            .decode_body(
                tenant,
                topic,
                &mut body,
                (&mut hold, &mut owed),
                declared,
                format,
                print,
                held,
            )
            .await
        {
            Ok(arena) => {
                hold.read();
                Ok((arena, hold, owed))
            }
            Err(e) => {
                drop(hold);
                linger(body);
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)] // one call site: the request's parts, passed through
    async fn decode_body<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        body: &mut Body,
        (hold, owed): (&mut BodyHold, &mut BodyOwed<'_>),
        declared: Option<u64>,
        format: BodyFormat<'_>,
        mut print: Option<&mut Fingerprinter>,
        held: &mut Held<'a>,
    ) -> Result<RecordArena, ApiError> {
        // A declared length that does not fit now is refused before the body is read; what
        // is held is what arrived. Reserved whole up front, eight requests from two tenants
        // allowed 1 record a second, each declaring 8 MiB and sending 13 bytes, held the whole
        // 64 MiB budget for the 30 s body timeout and every tenant was refused (review 31 of
        // #37: 0 of 378 admitted). One room could be made for (`inflight_bodies::room`) goes
        // on, and room is made as its bytes arrive: made for a declared length, it was cut
        // for bodies never sent (review 33: 110 such requests cut 40 uploads).
        if !hold.fits_or_could_make_room(declared.unwrap_or(0)) {
            return Err(self.cut_short(Cut::ServerBusy, self.busy(tenant)));
        }
        let mut bounds = self.bounds.clone();
        if let Some(max) = format.max_records {
            bounds.max_records_per_request = bounds.max_records_per_request.min(max);
        }
        let mut decoder = Decoder::new(format.framing, format.record, &bounds);
        let mut frames = Frames::new(body, self.body_read_timeout, self.max_body_bytes);
        let mut checked = Charge::default();
        let mut work = BodyWork::new(declared, self.schemas.most_owed());
        loop {
            let next = tokio::select! {
                biased;
                () = hold.cut() => {
                    return Err(self.cut_short(Cut::MadeRoom, self.busy(tenant)));
                }
                next = frames.next() => next,
            };
            let data = match next {
                Ok(Some(data)) => data,
                Ok(None) => {
                    if let Some(print) = print.as_deref_mut() {
                        print.body_complete();
                    }
                    break;
                }
                Err(Stopped::Timeout) => return Err(ApiError::BodyTimeout),
                Err(Stopped::Unreadable(e)) => return Err(self.unreadable(Some(tenant), &e)),
                Err(Stopped::TooLarge) => {
                    let limit = self.max_body_bytes;
                    let e = ApiError::BodyTooLarge { limit };
                    return Err(self.cut_short(Cut::BodyTooLarge, e));
                }
            };
            if let Some(print) = print.as_deref_mut() {
                print.update(&data);
            }
            let received = frames.received();
            match work.read(data.len(), received, owed) {
                Reading::On => {}
                // A body that may cost more than a small one: not read for a tenant whose
                // unpaid work is spent (its refusals would be paid by no one).
                Reading::Ask => self
                    .schemas
                    .unpaid_allows(tenant.id.as_str())
                    .map_err(|e| self.cut_short(Cut::RateLimited, unpaid_refusal(&e)))?,
                Reading::TooCostly(most) => {
                    let e = ApiError::Malformed(format!(
                        "the body's pieces cost more to read than a request may owe ({} ms: \
                         [schema_registry] tenant_unpaid_work_ms_burst, at {NS_PER_PIECE} ns a \
                         piece): send it in larger pieces",
                        most.as_millis()
                    ));
                    return Err(self.cut_short(Cut::Malformed, e));
                }
            }
            if received > hold.bytes()
                && !hold
                    .grow_making_room(received - hold.bytes(), ROOM_WAIT)
                    .await
            {
                return Err(self.cut_short(Cut::ServerBusy, self.busy(tenant)));
            }
            let read = decoder
                .push(&data)
                .map_err(|e| self.cut_short(cut_for(&e), e.into()))?;
            // Could the records read so far still be admitted? Not asked of a body that has
            // ended (its length all read): admission itself comes next. So a body of one chunk
            // meets admission twice in all (the early check, the decision), one of N chunks at
            // most N + 1 times.
            if !frames.ended() {
                // More to come: watched whatever it holds, stalled small uploads too.
                hold.watch_now();
            }
            if read.records > checked.records && !frames.ended() {
                checked = read;
                self.still_admissible(tenant, topic, read, held)?;
            }
        }
        Ok(decoder.finish()?)
    }

    /// Mid-upload: could `read` (the records read so far) be admitted now? If not, the whole
    /// request cannot be either, and it is cut short before the rest is read. With `[wait]`, a
    /// short wait goes on only on a seat of the waiting room.
    fn still_admissible<'a>(
        &'a self,
        tenant: &'a Tenant,
        topic: &Topic,
        read: Charge,
        held: &mut Held<'a>,
    ) -> Result<(), ApiError> {
        let checked = match self.admission.check_to(tenant, Some(topic), read) {
            Err(Denial::Refused(r)) => self.seated(tenant, held, r).map_err(Denial::Refused),
            other => other,
        };
        let Err(denial) = checked else {
            return Ok(());
        };
        let cut = match &denial {
            Denial::Refused(r) => {
                tenant
                    .stats()
                    .decided(read.records, read.bytes, Some(r.reason), true);
                Cut::RateLimited
            }
            Denial::TooLarge(_) => Cut::ExceedsBurst,
        };
        Err(self.cut_short(cut, self.denied(tenant, denial)))
    }

    pub(super) fn busy(&self, tenant: &Tenant) -> ApiError {
        let retry_after = self.inflight_bodies.retry_hint();
        refused(
            tenant,
            Refusal {
                reason: Reason::ServerBusy,
                retry_after,
                class: None,
                lag: None,
            },
        )
    }

    /// Counts an upload answered before its body was read to the end.
    pub(super) fn cut_short(&self, cut: Cut, error: ApiError) -> ApiError {
        self.inflight_bodies.count_cut_short(cut);
        error
    }
}

fn cut_for(e: &BodyError) -> Cut {
    match e {
        BodyError::Malformed(_)
        | BodyError::Invalid(_)
        | BodyError::NoRecords
        | BodyError::EntryId(_) => Cut::Malformed,
        BodyError::TooManyRecords { .. } => Cut::TooManyRecords,
        BodyError::RecordTooLarge(_) => Cut::RecordTooLarge,
    }
}

/// How long a body waits for the room another's cut uploads give back.
const ROOM_WAIT: Duration = Duration::from_millis(500);

/// After an answer given before the body's end, how much of the rest is read and discarded,
/// and for how long at most.
const LINGER_BYTES: u64 = 1024 * 1024;

const LINGER_TIME: Duration = Duration::from_secs(1);

/// ... and in how many pieces at most: a body sent in 1-byte chunks made its 1 MiB cost ~0.9 s
/// of CPU after every refusal (review 37a of #37). Ordinary clients send pieces of kilobytes.
const LINGER_PIECES: u32 = 1024;

/// A client still sending when we answer may get a connection reset before it reads the answer
/// if we close with its data unread (as every server that stops reading risks). So the rest of
/// the body is read and dropped in the background for a moment (at most [`LINGER_BYTES`],
/// [`LINGER_PIECES`] and [`LINGER_TIME`], like nginx's lingering close), while the answer goes out; then the
/// connection closes. Nothing read here is kept.
fn linger(mut body: Body) {
    if body.is_end_stream() {
        return;
    }
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + LINGER_TIME;
        let (mut read, mut pieces) = (0u64, 0u32);
        while read < LINGER_BYTES && pieces < LINGER_PIECES {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    read += frame.data_ref().map_or(0, |d| d.len() as u64);
                    pieces += 1;
                }
                _ => break,
            }
        }
    });
}

/// A refusal decided before the body is read (credential, topic, format, key): the body is
/// drained if small, as after the early check, then the refusal answered.
pub(super) async fn refused_unread(e: ApiError, request: ProduceRequest<'_>) -> Answer {
    drain_if_small(declared_length(request.headers), request.body).await;
    e.into()
}

/// An HTTP/1.1 connection whose request body was not read cannot carry another request, so an
/// early refusal would cost the client a new connection (and a TLS handshake) for every
/// refusal. On HTTP/2 a request body dropped unread resets its stream, and the reset can
/// overtake the answer (curl: "stream error in the HTTP/2 framing layer", no status at all). A small body that has already arrived — the common case — is read and dropped; a
/// large or slow one is not waited for, and its connection closes.
pub(super) async fn drain_if_small(declared: Option<u64>, body: Body) {
    if declared.is_some_and(|n| n > DRAIN_MAX_BYTES) {
        return;
    }
    // Undeclared (chunked, or an HTTP/2 body without content-length): read while it stays
    // small, as a declared small one is.
    let limited = http_body_util::Limited::new(body, DRAIN_MAX_BYTES as usize);
    let _ = tokio::time::timeout(DRAIN_WAIT, limited.collect()).await;
}

/// Largest declared body that is drained after an early refusal.
const DRAIN_MAX_BYTES: u64 = 16 * 1024;

/// How long draining may delay an early refusal.
const DRAIN_WAIT: Duration = Duration::from_millis(5);

pub(super) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
}

/// What reading a body costs that no budget pays for when the request ends refused: owed to
/// the tenant's unpaid work (`[schema_registry] tenant_unpaid_work_ms_*`, the same bucket the
/// schema step spends) and forgiven once admission takes the records. Estimated from what
/// arrived, not measured: per piece and per byte, from the profile of the costliest ways in
/// (review 37a of #37: 1-byte chunks cost 0.9 µs each; 8 MB of inflated JSON ~26 ms). A body
/// that is large, of unknown length or inflated is not read for a tenant whose unpaid work is
/// spent, so its refusals stay cheap.
struct BodyWork {
    declared: Option<u64>,
    asked: bool,
    /// The most one request may owe for its pieces: past it the body is not read on, whatever
    /// it would have been (review 37a: one 8 MB body in 1-byte chunks took 7.4 s to read).
    /// Its bytes are bounded by `max_body_bytes`, the operator's own choice, so a large body in
    /// ordinary pieces is never refused for them.
    most: Duration,
    pieces: Duration,
}

/// What reading a body goes on with after a piece.
enum Reading {
    On,
    /// Ask the tenant's unpaid work first: the body turned out more than small.
    Ask,
    /// It costs more than a request may owe.
    TooCostly(Duration),
}

/// Nanoseconds a piece of body costs to take in (the framing, the watch, the decoder's call).
const NS_PER_PIECE: u64 = 900;
/// Nanoseconds a byte costs to inflate and scan.
const NS_PER_BYTE: u64 = 3;
/// Bodies up to this long (declared, and not inflated past it) are read without asking.
const SMALL_BODY: u64 = 64 * 1024;

impl BodyWork {
    fn new(declared: Option<u64>, most: Duration) -> Self {
        Self {
            declared,
            asked: false,
            most,
            pieces: Duration::ZERO,
        }
    }

    /// A piece of `len` bytes arrived, `received` in all: its cost owed, and what next.
    fn read(&mut self, len: usize, received: u64, owed: &mut BodyOwed<'_>) -> Reading {
        let ns = NS_PER_PIECE.saturating_add((len as u64).saturating_mul(NS_PER_BYTE));
        owed.cost = owed.cost.saturating_add(Duration::from_nanos(ns));
        self.pieces = self
            .pieces
            .saturating_add(Duration::from_nanos(NS_PER_PIECE));
        if self.pieces > self.most {
            return Reading::TooCostly(self.most);
        }
        let large = self
            .declared
            .is_none_or(|d| d > SMALL_BODY || received > d.max(SMALL_BODY));
        if large && !self.asked {
            self.asked = true;
            return Reading::Ask;
        }
        Reading::On
    }
}

/// A body's reading cost, charged to its tenant's unpaid work when dropped unless admission
/// took its records ([`BodyOwed::admitted`]): nothing is allocated unless it is charged.
pub(super) struct BodyOwed<'a> {
    schemas: &'a crate::schema::Schemas,
    tenant: &'a str,
    cost: Duration,
}

impl BodyOwed<'_> {
    /// The records were admitted: their budgets paid for reading them.
    pub(super) fn admitted(mut self) {
        self.cost = Duration::ZERO;
    }
}

impl Drop for BodyOwed<'_> {
    fn drop(&mut self) {
        self.schemas.charge_unpaid(self.tenant, self.cost);
    }
}

/// The schema step's 429 for spent unpaid work, as a body's refusal.
fn unpaid_refusal(e: &crate::schema::SchemaError) -> ApiError {
    match e {
        crate::schema::SchemaError::Busy(wait, detail) => {
            ApiError::SchemaBusy(*wait, detail.clone())
        }
        // `Schemas::unpaid_allows` answers nothing else.
        _ => ApiError::SchemaBusy(
            Duration::from_secs(1),
            "this tenant's unpaid work is spent".into(),
        ),
    }
}
